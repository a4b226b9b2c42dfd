//! The small YAML subset used by camera calibration files (EuRoC `sensor.yaml`, MASt3R-SLAM
//! `intrinsics.yaml`): nested `key: value` maps by indentation, scalars, and flow lists
//! `[a, b, ...]` that may span several lines. Comments (`#`), directives (`%YAML:1.0`),
//! document markers (`---`) and tags (`!!opencv-matrix`) are skipped.

use std::path::Path;

use super::common::{malformed, parse_f64};
use crate::IoError;

/// Flattened entries: dotted key path (`T_BS.data`), raw value text, 1-based line.
pub(crate) struct MiniYaml {
    entries: Vec<(String, String, usize)>,
}

fn strip_comment(line: &str) -> &str {
    let bytes = line.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'#' && (i == 0 || bytes[i - 1].is_ascii_whitespace()) {
            return &line[..i];
        }
    }
    line
}

impl MiniYaml {
    pub(crate) fn parse(text: &str) -> Self {
        let mut entries = Vec::new();
        let mut stack: Vec<(usize, String)> = Vec::new();
        let lines: Vec<&str> = text.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            let line_no = i + 1;
            let raw = strip_comment(lines[i]);
            i += 1;
            let trimmed = raw.trim();
            if trimmed.is_empty()
                || trimmed.starts_with('%')
                || trimmed.starts_with("---")
                || trimmed.starts_with("...")
            {
                continue;
            }
            let indent = raw.len() - raw.trim_start().len();
            let Some(colon) = trimmed.find(':') else {
                continue;
            };
            let key = trimmed[..colon].trim().trim_matches('"').trim_matches('\'');
            let mut value = trimmed[colon + 1..].trim().to_string();
            if value.starts_with("!!") {
                value = value
                    .split_once(char::is_whitespace)
                    .map(|(_, rest)| rest.trim().to_string())
                    .unwrap_or_default();
            }
            while stack.last().is_some_and(|(ind, _)| *ind >= indent) {
                stack.pop();
            }
            let mut path: Vec<&str> = stack.iter().map(|(_, k)| k.as_str()).collect();
            path.push(key);
            let dotted = path.join(".");
            if value.is_empty() {
                stack.push((indent, key.to_string()));
                continue;
            }
            if value.starts_with('[') {
                while !value.contains(']') && i < lines.len() {
                    value.push(' ');
                    value.push_str(strip_comment(lines[i]).trim());
                    i += 1;
                }
            }
            entries.push((dotted, value, line_no));
        }
        Self { entries }
    }

    fn get(&self, key: &str) -> Option<(&str, usize)> {
        self.entries
            .iter()
            .find(|(k, _, _)| k == key)
            .map(|(_, v, l)| (v.as_str(), *l))
    }

    /// Line of a key, if present.
    pub(crate) fn line_of(&self, key: &str) -> Option<usize> {
        self.get(key).map(|(_, l)| l)
    }

    /// A scalar string value (quotes removed).
    pub(crate) fn string(&self, key: &str) -> Option<String> {
        self.get(key)
            .map(|(v, _)| v.trim().trim_matches('"').trim_matches('\'').to_string())
    }

    /// A required flow list of numbers.
    pub(crate) fn numbers(&self, key: &str, path: &Path) -> Result<Vec<f64>, IoError> {
        let (value, line) = self
            .get(key)
            .ok_or_else(|| malformed(path, format!("missing key '{key}'")))?;
        let inner = value.trim();
        let Some(inner) = inner.strip_prefix('[').and_then(|s| s.split(']').next()) else {
            return Err(malformed(
                path,
                format!("line {line}: '{key}' should be a list [a, b, ...]"),
            ));
        };
        inner
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(|t| parse_f64(t, path, line))
            .collect()
    }

    /// A required non-negative integer scalar.
    pub(crate) fn unsigned(&self, key: &str, path: &Path) -> Result<u32, IoError> {
        let (value, line) = self
            .get(key)
            .ok_or_else(|| malformed(path, format!("missing key '{key}'")))?;
        value.trim().parse::<u32>().map_err(|_| {
            malformed(
                path,
                format!("line {line}: '{key}' should be a non-negative integer, found '{value}'"),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn euroc_sensor_yaml() {
        let text = "%YAML:1.0\n---\n# General sensor definitions.\nsensor_type: camera\n\
            comment: VI-Sensor cam0 (MT9M034)\n\nT_BS:\n  cols: 4\n  rows: 4\n  data: [0.0148655429818, -0.999880929698, 0.00414029679422, -0.0216401454975,\n\
            \x20        0.999557249008, 0.0149672133247, 0.025715529948, -0.064676986768,\n\
            \x20       -0.0257744366974, 0.00375618835797, 0.999660727178, 0.00981073058949,\n\
            \x20        0.0, 0.0, 0.0, 1.0]\n\nrate_hz: 20\nresolution: [752, 480]\ncamera_model: pinhole\n\
            intrinsics: [458.654, 457.296, 367.215, 248.375] #fu, fv, cu, cv\n\
            distortion_model: radial-tangential\n\
            distortion_coefficients: [-0.28340811, 0.07395907, 0.00019359, 1.76187114e-05]\n";
        let y = MiniYaml::parse(text);
        let p = Path::new("sensor.yaml");
        assert_eq!(y.numbers("T_BS.data", p).unwrap().len(), 16);
        assert_eq!(y.numbers("T_BS.data", p).unwrap()[15], 1.0);
        assert_eq!(y.numbers("resolution", p).unwrap(), vec![752.0, 480.0]);
        assert_eq!(y.numbers("intrinsics", p).unwrap()[3], 248.375);
        assert_eq!(y.string("camera_model").as_deref(), Some("pinhole"));
        assert_eq!(y.unsigned("rate_hz", p).unwrap(), 20);
        assert_eq!(y.line_of("intrinsics"), Some(18));
        let e = y.numbers("missing", p).unwrap_err().to_string();
        assert!(e.contains("sensor.yaml") && e.contains("missing"), "{e}");
    }
}
