//! Where a new recording goes: an existing one there is moved aside to
//! `FILE.old` first, as perf does.

use std::io;
use std::path::{Path, PathBuf};

/// Moves the recording at `path` aside to `path.old`, where `path` names
/// a regular file, directly or through a symbolic link: the link itself
/// is moved then, so that the file it points to is kept whole (creating
/// `path` through the link would truncate it). Anything else (nothing,
/// `/dev/null`, `/dev/stdout`) is left as it is. The path moved to, if
/// any; an error is the rename's, for the path it would make.
pub fn move_aside(path: &Path) -> Result<Option<PathBuf>, (PathBuf, io::Error)> {
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return Ok(None);
    }
    let mut old = path.as_os_str().to_owned();
    old.push(".old");
    let old = PathBuf::from(old);
    match std::fs::rename(path, &old) {
        Ok(()) => Ok(Some(old)),
        Err(e) => Err((old, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_to_a_recording_is_moved_and_the_recording_kept() {
        let dir = tempfile::tempdir().unwrap();
        let precious = dir.path().join("precious.data");
        std::fs::write(&precious, b"keep me").unwrap();
        let link = dir.path().join("cur.data");
        std::os::unix::fs::symlink(&precious, &link).unwrap();
        let old = move_aside(&link).unwrap().unwrap();
        assert_eq!(old, dir.path().join("cur.data.old"));
        assert!(std::fs::symlink_metadata(&old).unwrap().is_symlink());
        assert!(std::fs::symlink_metadata(&link).is_err());
        std::fs::write(&link, b"new").unwrap();
        assert_eq!(std::fs::read(&precious).unwrap(), b"keep me");
    }

    #[test]
    fn a_plain_recording_is_moved_and_other_things_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ichnos.data");
        std::fs::write(&file, b"old").unwrap();
        assert_eq!(
            move_aside(&file).unwrap(),
            Some(dir.path().join("ichnos.data.old"))
        );
        assert_eq!(
            std::fs::read(dir.path().join("ichnos.data.old")).unwrap(),
            b"old"
        );
        assert_eq!(move_aside(&file).unwrap(), None);
        assert_eq!(move_aside(Path::new("/dev/null")).unwrap(), None);
        assert_eq!(move_aside(dir.path()).unwrap(), None);
    }
}
