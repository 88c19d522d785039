//! The binary as an installed command: `PATH` with its directory first, so
//! that a configuration naming `command = "mcptask"` (as `config init`
//! writes it) runs the binary under test.

use std::ffi::OsString;
use std::path::Path;

use crate::bin;

/// `$PATH` with the directory of the binary under test in front.
pub fn path_with_bin() -> OsString {
    let dir = Path::new(bin()).parent().expect("the binary's directory");
    let mut dirs = vec![dir.to_path_buf()];
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    std::env::join_paths(dirs).expect("a PATH")
}
