//! An S3 client for one bucket, set up from the standard AWS environment:
//! `AWS_ENDPOINT_URL` (a self-hosted server; path-style addressing),
//! `AWS_REGION` (`us-east-1` when unset, which self-hosted servers take),
//! and the credentials of `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` or
//! of `AWS_PROFILE` in the usual credentials file. No secret passes
//! through retagfs's own flags, logs or store.

use std::time::Duration;

use opendal::layers::{RetryLayer, TimeoutLayer};
use opendal::services::S3;
use opendal::Operator;

/// What a client needs besides the environment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Longest wait for one request's answer, or between two parts of a
    /// body: a stalled server is given up on, and the request retried.
    pub(crate) request_timeout: Duration,
    /// Retries of a request that failed in a way worth retrying (a reset,
    /// a timeout, 500, 503), with exponential backoff and jitter; the
    /// caller's deadline ends them sooner.
    pub(crate) retries: usize,
}

/// The region used when the environment names none.
const DEFAULT_REGION: &str = "us-east-1";

pub(crate) fn operator(bucket: &str, limits: Limits) -> anyhow::Result<Operator> {
    // The HTTP client every operator uses (reqwest), installed once.
    static TRANSPORT: std::sync::Once = std::sync::Once::new();
    TRANSPORT.call_once(opendal::install_default);
    let mut builder = S3::default()
        .bucket(bucket)
        .root("/")
        // Credentials come from the environment or the profile file; an
        // instance-metadata lookup would hang a first read off EC2.
        .disable_ec2_metadata();
    let region_set = ["AWS_REGION", "AWS_DEFAULT_REGION"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()));
    if !region_set {
        builder = builder.region(DEFAULT_REGION);
    }
    let operator = Operator::new(builder)
        .map_err(|e| anyhow::anyhow!("cannot set up an S3 client for bucket {bucket:?}: {e}"))?
        .layer(
            TimeoutLayer::new()
                .with_timeout(limits.request_timeout)
                .with_io_timeout(limits.request_timeout),
        )
        .layer(
            RetryLayer::new()
                .with_jitter()
                .with_min_delay(Duration::from_millis(50))
                .with_max_delay(Duration::from_secs(2))
                .with_max_times(limits.retries)
                .with_notify(|event: opendal::layers::RetryEvent<'_>| {
                    tracing::debug!("retrying after {:?}: {}", event.retry_after, event.err);
                    crate::remote::count_retry(event.err);
                }),
        );
    Ok(operator)
}

/// Where requests go, for log lines: the endpoint's host, never a secret.
pub(crate) fn endpoint_for_logs() -> String {
    let endpoint = ["AWS_ENDPOINT_URL", "AWS_ENDPOINT", "AWS_S3_ENDPOINT"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()));
    match endpoint {
        // A URL may carry user:password@; only the part after it is shown.
        Some(url) => {
            let without_scheme = url.split_once("://").map_or(url.as_str(), |(_, rest)| rest);
            let host = without_scheme.split('/').next().unwrap_or("");
            host.rsplit('@').next().unwrap_or(host).to_string()
        }
        None => "s3.amazonaws.com".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_in_logs_has_no_credentials() {
        // SAFETY of the test: no other test of this crate reads the variable.
        std::env::set_var("AWS_ENDPOINT_URL", "http://user:secret@127.0.0.1:9000/path");
        assert_eq!(endpoint_for_logs(), "127.0.0.1:9000");
        std::env::remove_var("AWS_ENDPOINT_URL");
    }
}
