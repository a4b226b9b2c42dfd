//! Reading image files: one decoder for scenes and data sets, strict about incomplete files.
//!
//! The `image` crate decodes a truncated JPEG without an error (its JPEG decoder fills the
//! missing part with grey, as browsers do), so a half-copied file would train or track silently
//! on a mostly blank picture. [`decode`] rejects it, as Pillow does ("image file is truncated"):
//! a JPEG must reach its end-of-image marker after its last scan. PNG truncation is already an
//! error of the PNG decoder.

use std::io::Cursor;
use std::path::Path;

use image::DynamicImage;

use crate::IoError;
use crate::error::at::malformed;

/// Decodes an image file (format from its content); errors name the file, and truncated or
/// empty images are errors.
pub(crate) fn decode(path: &Path) -> Result<DynamicImage, IoError> {
    let bytes = std::fs::read(path).map_err(|e| IoError::io(path, e))?;
    if bytes.starts_with(&[0xFF, 0xD8])
        && let Err(problem) = jpeg_complete(&bytes)
    {
        return Err(malformed(
            path,
            format!("the JPEG is truncated or corrupt: {problem}"),
        ));
    }
    let reader = image::ImageReader::new(Cursor::new(&bytes))
        .with_guessed_format()
        .map_err(|e| IoError::io(path, e))?;
    let image = reader.decode().map_err(|e| match e {
        image::ImageError::IoError(e) => malformed(path, format!("cannot decode the image: {e}")),
        image::ImageError::Unsupported(e) => {
            malformed(path, format!("not a supported image (PNG or JPEG): {e}"))
        }
        e => malformed(path, format!("cannot decode the image: {e}")),
    })?;
    if image.width() == 0 || image.height() == 0 {
        return Err(malformed(
            path,
            format!("the image is empty ({}x{})", image.width(), image.height()),
        ));
    }
    Ok(image)
}

/// Size of an image from its header, without decoding the pixels.
pub(crate) fn dimensions(path: &Path) -> Result<(u32, u32), IoError> {
    let reader = image::ImageReader::open(path)
        .map_err(|e| IoError::io(path, e))?
        .with_guessed_format()
        .map_err(|e| IoError::io(path, e))?;
    let (w, h) = reader
        .into_dimensions()
        .map_err(|e| malformed(path, format!("cannot read the image header: {e}")))?;
    if w == 0 || h == 0 {
        return Err(malformed(path, format!("the image is empty ({w}x{h})")));
    }
    Ok((w, h))
}

/// Walks a JPEG's marker segments (ITU T.81 B.1): after the start-of-image marker, every
/// segment is a marker with a 2-byte length, except the entropy-coded data after a start of
/// scan, which runs to the next marker that is not a stuffed `FF 00`, a restart `FF D0-D7` or
/// fill bytes. The file is complete when the end-of-image marker follows a scan.
fn jpeg_complete(bytes: &[u8]) -> Result<(), String> {
    let mut i = 2; // after SOI
    let mut scans = 0;
    loop {
        // Skip fill bytes before a marker.
        while i < bytes.len() && bytes[i] == 0xFF && i + 1 < bytes.len() && bytes[i + 1] == 0xFF {
            i += 1;
        }
        if i + 1 >= bytes.len() {
            return Err(format!(
                "the file ends at byte {} before the end-of-image marker",
                bytes.len()
            ));
        }
        if bytes[i] != 0xFF {
            return Err(format!(
                "expected a marker at byte {i}, found 0x{:02X}",
                bytes[i]
            ));
        }
        let marker = bytes[i + 1];
        i += 2;
        match marker {
            0xD9 => {
                return if scans > 0 {
                    Ok(())
                } else {
                    Err("end-of-image marker before any scan".into())
                };
            }
            0x01 | 0xD0..=0xD7 => continue, // no length
            _ => {}
        }
        if i + 2 > bytes.len() {
            return Err(format!(
                "the file ends at byte {} inside a segment header",
                bytes.len()
            ));
        }
        let len = u16::from_be_bytes([bytes[i], bytes[i + 1]]) as usize;
        if len < 2 || i + len > bytes.len() {
            return Err(format!(
                "a segment at byte {} runs past the end of the file ({} bytes)",
                i - 2,
                bytes.len()
            ));
        }
        i += len;
        if marker == 0xDA {
            scans += 1;
            // Entropy-coded data: up to the next real marker.
            loop {
                match bytes[i..].iter().position(|&b| b == 0xFF) {
                    None => {
                        return Err(format!(
                            "the file ends at byte {} inside the image data (scan {scans})",
                            bytes.len()
                        ));
                    }
                    Some(k) => {
                        i += k;
                        match bytes.get(i + 1) {
                            None => {
                                return Err(format!(
                                    "the file ends at byte {} inside the image data (scan {scans})",
                                    bytes.len()
                                ));
                            }
                            Some(0x00) | Some(0xD0..=0xD7) => i += 2,
                            Some(0xFF) => i += 1,
                            Some(_) => break,
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jpeg(width: u32, height: u32) -> Vec<u8> {
        let img = image::RgbImage::from_fn(width, height, |x, y| {
            image::Rgb([(x * 7) as u8, (y * 5) as u8, ((x ^ y) * 3) as u8])
        });
        let mut out = Vec::new();
        image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 90)
            .encode_image(&img)
            .unwrap();
        out
    }

    #[test]
    fn a_complete_jpeg_passes_and_every_truncation_of_it_fails() {
        let full = jpeg(40, 30);
        assert_eq!(jpeg_complete(&full), Ok(()));
        // Every prefix, including those that end right after a whole segment.
        for n in 2..full.len() {
            assert!(
                jpeg_complete(&full[..n]).is_err(),
                "a prefix of {n} of {} bytes passed",
                full.len()
            );
        }
        // Trailing data after the end-of-image marker (as some cameras append) is accepted.
        let mut trailing = full.clone();
        trailing.extend_from_slice(b"vendor trailer");
        assert_eq!(jpeg_complete(&trailing), Ok(()));
    }

    #[test]
    fn decode_names_the_truncated_file() {
        let dir = std::env::temp_dir().join(format!("rust3r-image-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let full = jpeg(64, 48);
        let ok = dir.join("ok.jpg");
        std::fs::write(&ok, &full).unwrap();
        assert_eq!(decode(&ok).unwrap().width(), 64);
        let cut = dir.join("cut.jpg");
        std::fs::write(&cut, &full[..full.len() * 2 / 3]).unwrap();
        // The image crate alone accepts it (filling the rest in), which is why the check exists.
        assert!(image::load_from_memory(&full[..full.len() * 2 / 3]).is_ok());
        let e = decode(&cut).unwrap_err().to_string();
        assert!(e.contains("cut.jpg") && e.contains("truncated"), "{e}");
        // A truncated PNG is an error too.
        let mut png = Vec::new();
        image::RgbImage::new(32, 32)
            .write_to(&mut Cursor::new(&mut png), image::ImageFormat::Png)
            .unwrap();
        let cut_png = dir.join("cut.png");
        std::fs::write(&cut_png, &png[..png.len() / 2]).unwrap();
        let e = decode(&cut_png).unwrap_err().to_string();
        assert!(e.contains("cut.png"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
