//! A folder of the view as browsers, scripts and players want it: an HTML
//! page (links and a player per track), JSON (`Accept: application/json`)
//! or an M3U8 playlist of its tracks (`?m3u`). Names are given exactly as
//! the tree holds them; links are percent-encoded.

use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Response, StatusCode};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use retagfs_core::view::served_file::ServedFile;
use retagfs_core::View;

use crate::route::{full, Reply};

/// What a path component's link leaves as it is (RFC 3986 unreserved).
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// One entry of a folder.
struct Item {
    name: String,
    /// The file's attributes; None for a folder.
    file: Option<ServedFile>,
}

impl Item {
    /// The entry's link, relative to its folder.
    fn href(&self) -> String {
        let encoded = utf8_percent_encode(&self.name, COMPONENT).to_string();
        match self.file {
            Some(_) => encoded,
            None => format!("{encoded}/"),
        }
    }
}

pub(crate) fn respond(view: &View, ino: u64, path: &str, query: Option<&str>, headers: &HeaderMap) -> Reply {
    let items = items(view, ino);
    let wants_json = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("application/json"));
    let (kind, body) = if query.is_some_and(|q| q.split('&').any(|p| p == "m3u" || p == "m3u8")) {
        ("application/vnd.apple.mpegurl; charset=utf-8", m3u8(&items))
    } else if wants_json {
        ("application/json", json(&items))
    } else {
        ("text/html; charset=utf-8", html(path, &items))
    };
    let length = body.len();
    let mut response = Response::new(full(body));
    *response.status_mut() = StatusCode::OK;
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

fn items(view: &View, ino: u64) -> Vec<Item> {
    let tree = view.tree();
    let Ok(listing) = tree.listing(ino, 2) else {
        return Vec::new();
    };
    listing
        .filter_map(|(child, name, _)| {
            let file = view.served_file_of(&tree.get(child)?.entry);
            Some(Item {
                name: name.to_string(),
                file,
            })
        })
        .collect()
}

fn json(items: &[Item]) -> String {
    let entries: Vec<serde_json::Value> = items
        .iter()
        .map(|i| match &i.file {
            Some(f) => serde_json::json!({
                "name": i.name, "type": "file", "href": i.href(), "size": f.size,
                "content_type": f.content_type, "track_id": f.track_id,
            }),
            None => serde_json::json!({"name": i.name, "type": "folder", "href": i.href()}),
        })
        .collect();
    serde_json::json!({ "entries": entries }).to_string()
}

fn m3u8(items: &[Item]) -> String {
    let mut out = String::from("#EXTM3U\n");
    for item in items.iter().filter(|i| i.file.is_some_and(|f| f.is_audio())) {
        let title = item
            .name
            .rsplit_once('.')
            .map_or(item.name.as_str(), |(stem, _)| stem);
        out.push_str(&format!(
            "#EXTINF:-1,{}\n{}\n",
            title.replace(['\r', '\n'], " "),
            item.href()
        ));
    }
    out
}

fn html(path: &str, items: &[Item]) -> String {
    let title = percent_encoding::percent_decode_str(path).decode_utf8_lossy();
    let mut rows = String::new();
    for item in items {
        let name = escape(&item.name);
        let href = escape(&item.href());
        match &item.file {
            None => rows.push_str(&format!("<li class=dir><a href=\"{href}\">{name}/</a></li>\n")),
            Some(f) if f.is_audio() => rows.push_str(&format!(
                "<li><a href=\"{href}\">{name}</a> <small>{}</small><br>\
                 <audio controls preload=\"none\" src=\"{href}\"></audio></li>\n",
                human_size(f.size)
            )),
            Some(f) => rows.push_str(&format!(
                "<li><a href=\"{href}\">{name}</a> <small>{}</small></li>\n",
                human_size(f.size)
            )),
        }
    }
    format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{t}</title><style>body{{font-family:sans-serif;margin:1em;max-width:50em}}\
         li{{margin:.6em 0;list-style:none}}audio{{width:100%}}</style></head>\
         <body><h1>{t}</h1><p><a href=\"../\">..</a> · <a href=\"?m3u\">playlist</a></p>\
         <ul>\n{rows}</ul></body></html>\n",
        t = escape(&title)
    )
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

fn human_size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.0} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}
