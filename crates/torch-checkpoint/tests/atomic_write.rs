//! `safetensors::write_atomic`: all or nothing, no temporary files left, plain permissions.

use std::io::Write;

use rust3r_torch_checkpoint::safetensors::write_atomic;

fn names(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn atomic_write_replaces_whole_files_and_keeps_the_old_one_on_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weights.safetensors");
    write_atomic(&path, |w| w.write_all(b"first")).unwrap();
    write_atomic(&path, |w| w.write_all(b"second, longer")).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"second, longer");
    assert_eq!(names(dir.path()), ["weights.safetensors"]);

    // A failing body: the error names the file, the old content stays, nothing is left over.
    let e = write_atomic(&path, |w| {
        w.write_all(b"partial")?;
        Err(std::io::Error::other("disk full"))
    })
    .unwrap_err();
    assert_eq!(e.path(), path);
    assert!(e.to_string().contains("disk full"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), b"second, longer");
    assert_eq!(names(dir.path()), ["weights.safetensors"]);

    // A missing folder is an error naming the file, not a panic.
    let missing = dir.path().join("no/such/dir/w.safetensors");
    let e = write_atomic(&missing, |w| w.write_all(b"x")).unwrap_err();
    assert_eq!(e.path(), missing);

    // The file gets the permissions of a plain `File::create` in the same folder.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let plain = dir.path().join("plain");
        std::fs::File::create(&plain).unwrap();
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode();
        assert_eq!(mode(&path), mode(&plain));
    }
}
