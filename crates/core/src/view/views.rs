//! Several views in one mount: each a top-level folder of the tracks its
//! query selects (every track without one), laid out by its own template
//! and fallbacks. A track in several views is one file in each (the same
//! inode; see [`crate::view::tree::Tree::link_count`]).

use std::sync::Arc;

use crate::query::Query;
use crate::view::template::{Fallbacks, Template};

/// One view of a mount with several (`[[view]]` in the configuration file).
#[derive(Debug, Clone)]
pub struct ViewSpec {
    /// Its folder at the mount's root.
    pub name: String,
    pub template: Template,
    /// Which tracks it shows; None: all.
    pub query: Option<Arc<Query>>,
    pub fallbacks: Fallbacks,
}

impl ViewSpec {
    /// The name of the view's folder at the root, as the tree names it:
    /// sanitized (a leading `.` becomes `_`), Windows-safe with
    /// `windows_names`, cut to the longest name allowed.
    pub fn folder_name(&self, windows_names: bool) -> Option<String> {
        let name = if windows_names {
            crate::view::tree::windows_safe(&self.name)
        } else {
            self.name.clone()
        };
        let name = crate::view::tree::sanitize_component(&name)?;
        Some(
            crate::view::tree::truncate_utf8(&name, crate::view::tree::NAME_MAX)
                .trim_end()
                .to_string(),
        )
    }
}

/// Why a view's name cannot be a folder at the root.
pub fn invalid_view_name(name: &str) -> Option<&'static str> {
    if name.trim().is_empty() {
        Some("a view's name is its folder: it cannot be empty")
    } else if name.contains('/') || name.contains('\0') {
        Some("a view's name is one folder: it cannot hold `/`")
    } else if name == "."
        || name == ".."
        || name == crate::view::search::SEARCH_DIR_NAME
        || name == crate::view::playlists::PLAYLISTS_FOLDER
    {
        Some("that name is taken by the mount itself")
    } else {
        None
    }
}
