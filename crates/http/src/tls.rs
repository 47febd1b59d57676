//! HTTPS: a certificate chain and its key in PEM files, served by rustls,
//! and read again on SIGHUP (a renewed certificate without a restart; a
//! renewal that cannot be read keeps the one in use, and says so).

use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::RwLock;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::TlsAcceptor;

/// Where the certificate chain and its private key are.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

pub(crate) struct Tls {
    files: TlsFiles,
    acceptor: RwLock<TlsAcceptor>,
}

impl Tls {
    pub(crate) fn load(files: TlsFiles) -> anyhow::Result<Tls> {
        let config = server_config(&files)?;
        Ok(Tls {
            files,
            acceptor: RwLock::new(TlsAcceptor::from(config)),
        })
    }

    /// The acceptor for a new connection (those open keep theirs).
    pub(crate) fn acceptor(&self) -> TlsAcceptor {
        self.acceptor.read().clone()
    }

    /// Reads the files again; on an error the certificate in use stays.
    pub(crate) fn reload(&self) {
        match server_config(&self.files) {
            Ok(config) => {
                *self.acceptor.write() = TlsAcceptor::from(config);
                tracing::info!("HTTPS: certificate {} read again", self.files.cert.display());
            }
            Err(e) => tracing::warn!("HTTPS: {e:#}; the certificate in use stays"),
        }
    }
}

fn server_config(files: &TlsFiles) -> anyhow::Result<Arc<ServerConfig>> {
    let certs = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| anyhow::anyhow!("--tls-cert {}: {e}", files.cert.display()))?;
    if certs.is_empty() {
        anyhow::bail!("--tls-cert {}: no PEM certificate in it", files.cert.display());
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| anyhow::anyhow!("--tls-key {}: {e}", files.key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            anyhow::anyhow!(
                "--tls-cert {} and --tls-key {} do not make a certificate: {e}",
                files.cert.display(),
                files.key.display()
            )
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
