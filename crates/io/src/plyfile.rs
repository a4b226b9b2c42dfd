//! A small, defensive reader for the PLY container (header + element bodies).
//!
//! Supports `ascii`, `binary_little_endian` and `binary_big_endian` bodies, all
//! scalar types and list properties (whose values are skipped). Property values
//! are delivered row by row as `f64`, which represents every PLY scalar type
//! exactly except 64-bit floats (which are returned as is).

use crate::error::{Problem, Result, malformed};

/// Body encoding declared by the `format` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encoding {
    Ascii,
    BinaryLe,
    BinaryBe,
}

/// A PLY scalar type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scalar {
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    F32,
    F64,
}

impl Scalar {
    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "char" | "int8" => Self::I8,
            "uchar" | "uint8" => Self::U8,
            "short" | "int16" => Self::I16,
            "ushort" | "uint16" => Self::U16,
            "int" | "int32" => Self::I32,
            "uint" | "uint32" => Self::U32,
            "float" | "float32" => Self::F32,
            "double" | "float64" => Self::F64,
            _ => return None,
        })
    }

    /// Size in bytes in a binary body.
    pub(crate) fn size(self) -> usize {
        match self {
            Self::I8 | Self::U8 => 1,
            Self::I16 | Self::U16 => 2,
            Self::I32 | Self::U32 | Self::F32 => 4,
            Self::F64 => 8,
        }
    }

    pub(crate) fn is_integer(self) -> bool {
        !matches!(self, Self::F32 | Self::F64)
    }
}

/// One `property` line.
#[derive(Debug, Clone)]
pub(crate) struct Property {
    pub name: String,
    /// Value type (item type for lists).
    pub scalar: Scalar,
    /// Count type when this is a list property.
    pub list_count: Option<Scalar>,
}

/// One `element` line and its properties.
#[derive(Debug, Clone)]
pub(crate) struct Element {
    pub name: String,
    pub count: usize,
    pub properties: Vec<Property>,
}

impl Element {
    /// Index of the property called `name`.
    pub(crate) fn find(&self, name: &str) -> Option<usize> {
        self.properties.iter().position(|p| p.name == name)
    }

    /// Index of the scalar property called `name`, or a descriptive error.
    pub(crate) fn require_scalar(&self, name: &str) -> Result<usize> {
        let Some(index) = self.find(name) else {
            return malformed!("element '{}' has no property '{name}'", self.name);
        };
        if self.properties[index].list_count.is_some() {
            return malformed!(
                "property '{name}' of element '{}' is a list, expected a scalar",
                self.name
            );
        }
        Ok(index)
    }

    /// Bytes per row in a binary body when there are no list properties.
    fn fixed_row_size(&self) -> Option<usize> {
        self.properties
            .iter()
            .map(|p| p.list_count.is_none().then_some(p.scalar.size()))
            .sum()
    }

    /// A lower bound on the bytes each row needs in the body.
    fn min_row_size(&self, encoding: Encoding) -> usize {
        match encoding {
            // At least one character per value (separators not counted).
            Encoding::Ascii => self.properties.len(),
            Encoding::BinaryLe | Encoding::BinaryBe => self
                .properties
                .iter()
                .map(|p| p.list_count.unwrap_or(p.scalar).size())
                .sum(),
        }
    }
}

/// A parsed PLY header.
#[derive(Debug, Clone)]
pub(crate) struct Header {
    pub encoding: Encoding,
    pub elements: Vec<Element>,
    /// Byte offset of the body (just after `end_header\n`).
    pub body_start: usize,
}

impl Header {
    /// Index of the element called `name`.
    pub(crate) fn find(&self, name: &str) -> Option<usize> {
        self.elements.iter().position(|e| e.name == name)
    }
}

/// Parses the header of a PLY file.
pub(crate) fn parse_header(bytes: &[u8]) -> Result<Header> {
    let mut lines = HeaderLines {
        bytes,
        pos: 0,
        number: 0,
    };
    if lines.next().map(<[u8]>::trim_ascii) != Some(b"ply") {
        return malformed!("not a PLY file (missing 'ply' magic line)");
    }

    let mut encoding = None;
    let mut elements: Vec<Element> = Vec::new();
    loop {
        let Some(raw) = lines.next() else {
            return malformed!("PLY header has no 'end_header' line");
        };
        let line_no = lines.number;
        let line = String::from_utf8_lossy(raw);
        let line = line.trim();
        let mut words = line.split_ascii_whitespace();
        let Some(keyword) = words.next() else {
            continue;
        };
        let words: Vec<&str> = words.collect();
        match keyword {
            "end_header" => break,
            "comment" | "obj_info" => {}
            "format" => {
                if encoding.is_some() {
                    return malformed!("PLY header line {line_no}: second 'format' line");
                }
                encoding = Some(match words.as_slice() {
                    ["ascii", _] => Encoding::Ascii,
                    ["binary_little_endian", _] => Encoding::BinaryLe,
                    ["binary_big_endian", _] => Encoding::BinaryBe,
                    _ => return malformed!("PLY header line {line_no}: unknown format '{line}'"),
                });
            }
            "element" => {
                let [name, count] = words.as_slice() else {
                    return malformed!(
                        "PLY header line {line_no}: expected 'element <name> <count>', got '{line}'"
                    );
                };
                let Ok(count) = count.parse::<usize>() else {
                    return malformed!(
                        "PLY header line {line_no}: invalid count '{count}' for element '{name}'"
                    );
                };
                if elements.iter().any(|e| e.name == *name) {
                    return malformed!("PLY header line {line_no}: duplicate element '{name}'");
                }
                elements.push(Element {
                    name: (*name).to_owned(),
                    count,
                    properties: Vec::new(),
                });
            }
            "property" => {
                let Some(element) = elements.last_mut() else {
                    return malformed!("PLY header line {line_no}: property before any element");
                };
                let type_of = |name: &str| match Scalar::parse(name) {
                    Some(s) => Ok(s),
                    None => malformed!("PLY header line {line_no}: unknown property type '{name}'"),
                };
                let property = match words.as_slice() {
                    ["list", count, item, name] => {
                        let count = type_of(count)?;
                        if !count.is_integer() {
                            return malformed!(
                                "PLY header line {line_no}: list count type must be an integer"
                            );
                        }
                        Property {
                            name: (*name).to_owned(),
                            scalar: type_of(item)?,
                            list_count: Some(count),
                        }
                    }
                    [ty, name] => Property {
                        name: (*name).to_owned(),
                        scalar: type_of(ty)?,
                        list_count: None,
                    },
                    _ => {
                        return malformed!(
                            "PLY header line {line_no}: malformed property line '{line}'"
                        );
                    }
                };
                if element.find(&property.name).is_some() {
                    return malformed!(
                        "PLY header line {line_no}: duplicate property '{}' in element '{}'",
                        property.name,
                        element.name
                    );
                }
                element.properties.push(property);
            }
            other => return malformed!("PLY header line {line_no}: unknown keyword '{other}'"),
        }
    }
    let Some(encoding) = encoding else {
        return malformed!("PLY header has no 'format' line");
    };
    Ok(Header {
        encoding,
        elements,
        body_start: lines.pos,
    })
}

/// Iterates over the raw header lines (accepting `\n` and `\r\n` endings).
struct HeaderLines<'a> {
    bytes: &'a [u8],
    pos: usize,
    number: usize,
}

impl<'a> Iterator for HeaderLines<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let rest = self.bytes.get(self.pos..)?;
        let len = rest.iter().position(|&b| b == b'\n')?;
        let line = &rest[..len];
        self.pos += len + 1;
        self.number += 1;
        Some(line.strip_suffix(b"\r").unwrap_or(line))
    }
}

/// Sequential reader over the element bodies.
pub(crate) struct Body<'a> {
    header: &'a Header,
    bytes: &'a [u8],
    pos: usize,
    next_element: usize,
}

impl<'a> Body<'a> {
    /// Starts reading the body of `bytes` (the whole file) described by `header`.
    ///
    /// Fails early (before anything is allocated for the data) when the file is
    /// too short to hold the declared element counts.
    pub(crate) fn new(header: &'a Header, bytes: &'a [u8]) -> Result<Self> {
        let available = bytes.len().saturating_sub(header.body_start);
        let mut needed = 0usize;
        for element in &header.elements {
            if element.properties.is_empty() && element.count > 0 {
                return malformed!("element '{}' has no properties", element.name);
            }
            let row = element.min_row_size(header.encoding);
            let left = available.saturating_sub(needed);
            match element.count.checked_mul(row) {
                Some(size) if size <= left => needed += size,
                _ if header.encoding == Encoding::Ascii => {
                    return malformed!(
                        "element '{}' has count {}, more than the remaining {left} bytes of ASCII data can hold",
                        element.name,
                        element.count,
                    );
                }
                _ => {
                    let fit = left.checked_div(row).unwrap_or(0);
                    return malformed!(
                        "element '{}' has count {} but the file ends after {} of them",
                        element.name,
                        element.count,
                        fit.min(element.count)
                    );
                }
            }
        }
        Ok(Self {
            header,
            bytes,
            pos: header.body_start,
            next_element: 0,
        })
    }

    /// Reads the rows of element `index`, skipping (reading) any elements before it.
    ///
    /// `visit` gets the row number and one value per property (NaN for list
    /// properties, whose values are skipped).
    pub(crate) fn read_element(
        &mut self,
        index: usize,
        mut visit: impl FnMut(usize, &[f64]) -> Result<()>,
    ) -> Result<()> {
        if index < self.next_element {
            let elements = &self.header.elements;
            return malformed!(
                "element '{}' must come before element '{}'",
                elements[index].name,
                elements[self.next_element - 1].name
            );
        }
        while self.next_element < index {
            self.read_rows(self.next_element, &mut |_, _| Ok(()))?;
            self.next_element += 1;
        }
        self.read_rows(index, &mut visit)?;
        self.next_element += 1;
        Ok(())
    }

    fn read_rows(
        &mut self,
        index: usize,
        visit: &mut dyn FnMut(usize, &[f64]) -> Result<()>,
    ) -> Result<()> {
        let element = &self.header.elements[index];
        if element.count == 0 {
            return Ok(());
        }
        let mut row = vec![0.0f64; element.properties.len()];
        let truncated = |read: usize| -> Problem {
            Problem::Malformed(format!(
                "element '{}' has count {} but the file ends after {read} of them",
                element.name, element.count
            ))
        };
        match self.header.encoding {
            Encoding::BinaryLe | Encoding::BinaryBe => {
                let little = self.header.encoding == Encoding::BinaryLe;
                if let Some(stride) = element.fixed_row_size() {
                    // Fast path: fixed-size rows.
                    let total = element
                        .count
                        .checked_mul(stride)
                        .ok_or_else(|| truncated(0))?;
                    let Some(data) = self.bytes.get(self.pos..).and_then(|b| b.get(..total)) else {
                        let left = self.bytes.len().saturating_sub(self.pos);
                        return Err(truncated(left.checked_div(stride).unwrap_or(0)));
                    };
                    for (r, chunk) in data.chunks_exact(stride).enumerate() {
                        let mut offset = 0;
                        for (slot, property) in row.iter_mut().zip(&element.properties) {
                            let size = property.scalar.size();
                            *slot = decode_binary(
                                property.scalar,
                                &chunk[offset..offset + size],
                                little,
                            );
                            offset += size;
                        }
                        visit(r, &row)?;
                    }
                    self.pos += total;
                } else {
                    for r in 0..element.count {
                        for (slot, property) in row.iter_mut().zip(&element.properties) {
                            match property.list_count {
                                None => {
                                    *slot = self
                                        .take_binary(property.scalar, little)
                                        .ok_or_else(|| truncated(r))?
                                }
                                Some(count_type) => {
                                    let count = self
                                        .take_binary(count_type, little)
                                        .ok_or_else(|| truncated(r))?;
                                    let skip = list_len(count, &element.name, &property.name)?
                                        .checked_mul(property.scalar.size())
                                        .ok_or_else(|| truncated(r))?;
                                    self.take_bytes(skip).ok_or_else(|| truncated(r))?;
                                    *slot = f64::NAN;
                                }
                            }
                        }
                        visit(r, &row)?;
                    }
                }
            }
            Encoding::Ascii => {
                for r in 0..element.count {
                    for (slot, property) in row.iter_mut().zip(&element.properties) {
                        let mut token = || -> Result<f64> {
                            let token = self.take_token().ok_or_else(|| truncated(r))?;
                            match std::str::from_utf8(token)
                                .ok()
                                .and_then(|t| t.parse::<f64>().ok())
                            {
                                Some(v) => Ok(v),
                                None => malformed!(
                                    "element '{}' row {r}: invalid number '{}' for property '{}'",
                                    element.name,
                                    String::from_utf8_lossy(token),
                                    property.name
                                ),
                            }
                        };
                        match property.list_count {
                            None => *slot = token()?,
                            Some(_) => {
                                let count = list_len(token()?, &element.name, &property.name)?;
                                for _ in 0..count {
                                    token()?;
                                }
                                *slot = f64::NAN;
                            }
                        }
                    }
                    visit(r, &row)?;
                }
            }
        }
        Ok(())
    }

    fn take_bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let bytes = self.bytes.get(self.pos..)?.get(..n)?;
        self.pos += n;
        Some(bytes)
    }

    fn take_binary(&mut self, scalar: Scalar, little: bool) -> Option<f64> {
        self.take_bytes(scalar.size())
            .map(|b| decode_binary(scalar, b, little))
    }

    /// Next whitespace-separated token of an ASCII body.
    fn take_token(&mut self) -> Option<&'a [u8]> {
        let rest = self.bytes.get(self.pos..)?;
        let start = rest.iter().position(|b| !b.is_ascii_whitespace())?;
        let len = rest[start..]
            .iter()
            .position(u8::is_ascii_whitespace)
            .unwrap_or(rest.len() - start);
        self.pos += start + len;
        Some(&rest[start..start + len])
    }
}

fn list_len(count: f64, element: &str, property: &str) -> Result<usize> {
    if count >= 0.0 && count.fract() == 0.0 && count <= u32::MAX as f64 {
        Ok(count as usize)
    } else {
        malformed!("element '{element}': invalid list length {count} for property '{property}'")
    }
}

/// Decodes one binary scalar; `b` must be exactly `scalar.size()` bytes.
fn decode_binary(scalar: Scalar, b: &[u8], little: bool) -> f64 {
    macro_rules! num {
        ($t:ty) => {{
            let mut raw = [0u8; size_of::<$t>()];
            raw.copy_from_slice(b);
            f64::from(if little {
                <$t>::from_le_bytes(raw)
            } else {
                <$t>::from_be_bytes(raw)
            })
        }};
    }
    match scalar {
        Scalar::I8 => num!(i8),
        Scalar::U8 => num!(u8),
        Scalar::I16 => num!(i16),
        Scalar::U16 => num!(u16),
        Scalar::I32 => num!(i32),
        Scalar::U32 => num!(u32),
        Scalar::F32 => num!(f32),
        Scalar::F64 => num!(f64),
    }
}
