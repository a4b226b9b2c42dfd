//! `atomic::write_atomic_with`: all or nothing, no temporary files left, plain permissions.

use std::io::Write;

use rust3r_io::atomic::write_atomic_with;

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
    let path = dir.path().join("scene.json");
    write_atomic_with(&path, |w| w.write_all(b"first")).unwrap();
    write_atomic_with(&path, |w| w.write_all(b"second, longer")).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"second, longer");
    assert_eq!(names(dir.path()), ["scene.json"]);

    let e = write_atomic_with(&path, |w| {
        w.write_all(b"partial")?;
        Err(std::io::Error::other("disk full"))
    })
    .unwrap_err();
    assert_eq!(e.to_string(), "disk full");
    assert_eq!(std::fs::read(&path).unwrap(), b"second, longer");
    assert_eq!(names(dir.path()), ["scene.json"]);

    assert!(write_atomic_with(&dir.path().join("no/such/dir/f"), |w| w.write_all(b"x")).is_err());
    assert!(write_atomic_with(std::path::Path::new("/"), |w| w.write_all(b"x")).is_err());

    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let plain = dir.path().join("plain");
        std::fs::File::create(&plain).unwrap();
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode();
        assert_eq!(mode(&path), mode(&plain));
    }
}
