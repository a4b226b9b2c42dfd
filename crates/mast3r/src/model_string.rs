//! Parsing of the Python constructor string a MASt3R checkpoint stores in `args.model`, e.g.
//! `AsymmetricMASt3R(pos_embed='RoPE100', img_size=(512, 512), depth_mode=('exp', -inf, inf), ...)`.
//!
//! Only literal keyword arguments are understood (strings, ints, floats, `inf`/`nan`, booleans,
//! `None`, tuples and lists); nothing is evaluated.

use crate::error::ConfigError;

/// A Python literal from a constructor string.
#[derive(Clone, Debug, PartialEq)]
pub enum PyValue {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An integer literal.
    Int(i64),
    /// A float literal (including `inf`, `-inf`, `nan`).
    Float(f64),
    /// A quoted string.
    Str(String),
    /// A tuple.
    Tuple(Vec<PyValue>),
    /// A list.
    List(Vec<PyValue>),
}

impl PyValue {
    /// The value as a number (ints widen to `f64`).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            PyValue::Int(i) => Some(*i as f64),
            PyValue::Float(f) => Some(*f),
            _ => None,
        }
    }
}

/// A parsed constructor call: class name and keyword arguments in order.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelString {
    /// The class name, e.g. `AsymmetricMASt3R`.
    pub class: String,
    /// Keyword arguments in the order written.
    pub kwargs: Vec<(String, PyValue)>,
}

impl ModelString {
    /// Parses `Class(key=value, ...)`.
    pub fn parse(s: &str) -> Result<Self, ConfigError> {
        let mut p = Parser {
            s: s.as_bytes(),
            pos: 0,
        };
        p.ws();
        let class = p.ident().ok_or_else(|| p.error("expected a class name"))?;
        p.ws();
        p.expect(b'(')?;
        let mut kwargs: Vec<(String, PyValue)> = Vec::new();
        loop {
            p.ws();
            if p.eat(b')') {
                break;
            }
            let Some(key) = p.ident() else {
                return Err(p.error(
                    "expected a keyword argument (positional arguments are not supported)",
                ));
            };
            p.ws();
            p.expect(b'=')?;
            p.ws();
            let value = p.value(0)?;
            if kwargs.iter().any(|(k, _)| *k == key) {
                return Err(p.error(&format!("keyword argument `{key}` repeated")));
            }
            kwargs.push((key, value));
            p.ws();
            if p.eat(b',') {
                continue;
            }
            p.expect(b')')?;
            break;
        }
        p.ws();
        if p.pos != p.s.len() {
            return Err(p.error("unexpected text after the closing parenthesis"));
        }
        Ok(ModelString { class, kwargs })
    }

    /// The value of a keyword argument.
    pub fn get(&self, key: &str) -> Option<&PyValue> {
        self.kwargs.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

/// Nesting limit for tuples/lists (the parser is recursive).
const MAX_DEPTH: usize = 16;

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn error(&self, what: &str) -> ConfigError {
        ConfigError(format!(
            "constructor string, character {}: {what}",
            self.pos
        ))
    }

    fn ws(&mut self) {
        while self.pos < self.s.len() && self.s[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.s.get(self.pos) == Some(&c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: u8) -> Result<(), ConfigError> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.error(&format!("expected `{}`", c as char)))
        }
    }

    fn ident(&mut self) -> Option<String> {
        let start = self.pos;
        while self.pos < self.s.len()
            && (self.s[self.pos].is_ascii_alphanumeric() || self.s[self.pos] == b'_')
        {
            self.pos += 1;
        }
        if self.pos == start || self.s[start].is_ascii_digit() {
            self.pos = start;
            return None;
        }
        Some(String::from_utf8_lossy(&self.s[start..self.pos]).into_owned())
    }

    fn value(&mut self, depth: usize) -> Result<PyValue, ConfigError> {
        if depth > MAX_DEPTH {
            return Err(self.error("values nested too deeply"));
        }
        match self.s.get(self.pos) {
            None => Err(self.error("expected a value")),
            Some(b'\'' | b'"') => self.string(),
            Some(b'(') => {
                self.pos += 1;
                let (items, trailing_comma) = self.sequence(b')', depth)?;
                // `(x)` is just `x`; `(x,)` and `()` are tuples.
                if items.len() == 1 && !trailing_comma {
                    Ok(items.into_iter().next().expect("one item"))
                } else {
                    Ok(PyValue::Tuple(items))
                }
            }
            Some(b'[') => {
                self.pos += 1;
                Ok(PyValue::List(self.sequence(b']', depth)?.0))
            }
            Some(b'-' | b'+') => {
                let neg = self.s[self.pos] == b'-';
                self.pos += 1;
                self.ws();
                match self.value(depth + 1)? {
                    PyValue::Int(i) => Ok(PyValue::Int(if neg { -i } else { i })),
                    PyValue::Float(f) => Ok(PyValue::Float(if neg { -f } else { f })),
                    _ => Err(self.error("sign before a non-number")),
                }
            }
            Some(c) if c.is_ascii_digit() || *c == b'.' => self.number(),
            Some(_) => match self.ident().as_deref() {
                Some("None") => Ok(PyValue::None),
                Some("True") => Ok(PyValue::Bool(true)),
                Some("False") => Ok(PyValue::Bool(false)),
                Some("inf") => Ok(PyValue::Float(f64::INFINITY)),
                Some("nan") => Ok(PyValue::Float(f64::NAN)),
                Some(other) => Err(self.error(&format!(
                    "`{other}` is not a literal (only literals are supported)"
                ))),
                None => Err(self.error("expected a value")),
            },
        }
    }

    /// Items up to `close`; returns whether the last item was followed by a comma.
    fn sequence(&mut self, close: u8, depth: usize) -> Result<(Vec<PyValue>, bool), ConfigError> {
        let mut items = Vec::new();
        let mut trailing = false;
        loop {
            self.ws();
            if self.eat(close) {
                return Ok((items, trailing));
            }
            items.push(self.value(depth + 1)?);
            self.ws();
            trailing = self.eat(b',');
            if !trailing {
                self.ws();
                self.expect(close)?;
                return Ok((items, false));
            }
        }
    }

    fn string(&mut self) -> Result<PyValue, ConfigError> {
        let quote = self.s[self.pos];
        self.pos += 1;
        let mut out = Vec::new();
        loop {
            match self.s.get(self.pos) {
                None => return Err(self.error("unterminated string")),
                Some(&c) if c == quote => {
                    self.pos += 1;
                    break;
                }
                Some(b'\\') => {
                    let Some(&e) = self.s.get(self.pos + 1) else {
                        return Err(self.error("unterminated string"));
                    };
                    out.push(match e {
                        b'n' => b'\n',
                        b't' => b'\t',
                        other => other,
                    });
                    self.pos += 2;
                }
                Some(&c) => {
                    out.push(c);
                    self.pos += 1;
                }
            }
        }
        String::from_utf8(out)
            .map(PyValue::Str)
            .map_err(|_| self.error("string is not UTF-8"))
    }

    fn number(&mut self) -> Result<PyValue, ConfigError> {
        let start = self.pos;
        while self.pos < self.s.len()
            && (self.s[self.pos].is_ascii_alphanumeric() || matches!(self.s[self.pos], b'.' | b'_'))
            || (self.pos > start
                && matches!(self.s.get(self.pos), Some(b'+' | b'-'))
                && matches!(self.s[self.pos - 1], b'e' | b'E'))
        {
            self.pos += 1;
        }
        let text: String = String::from_utf8_lossy(&self.s[start..self.pos]).replace('_', "");
        if let Ok(i) = text.parse::<i64>() {
            return Ok(PyValue::Int(i));
        }
        if text
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
            && let Ok(f) = text.parse::<f64>()
        {
            return Ok(PyValue::Float(f));
        }
        Err(self.error(&format!("`{text}` is not a number")))
    }
}

/// Formats a value the way Python's `repr` does for the literals MASt3R uses.
pub(crate) fn py_repr_f64(x: f64) -> String {
    if x == f64::INFINITY {
        "inf".into()
    } else if x == f64::NEG_INFINITY {
        "-inf".into()
    } else if x.is_nan() {
        "nan".into()
    } else if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_released_string() {
        let s = "AsymmetricMASt3R(pos_embed='RoPE100', patch_embed_cls='ManyAR_PatchEmbed', img_size=(512, 512), \
                 head_type='catmlp+dpt', output_mode='pts3d+desc24', depth_mode=('exp', -inf, inf), \
                 conf_mode=('exp', 1, inf), enc_embed_dim=1024, enc_depth=24, enc_num_heads=16, dec_embed_dim=768, \
                 dec_depth=12, dec_num_heads=12, two_confs=True, desc_conf_mode=('exp', 0, inf))";
        let m = ModelString::parse(s).unwrap();
        assert_eq!(m.class, "AsymmetricMASt3R");
        assert_eq!(
            m.get("img_size"),
            Some(&PyValue::Tuple(vec![PyValue::Int(512), PyValue::Int(512)]))
        );
        assert_eq!(
            m.get("depth_mode"),
            Some(&PyValue::Tuple(vec![
                PyValue::Str("exp".into()),
                PyValue::Float(f64::NEG_INFINITY),
                PyValue::Float(f64::INFINITY)
            ]))
        );
        assert_eq!(m.get("two_confs"), Some(&PyValue::Bool(true)));
        assert_eq!(m.get("enc_depth"), Some(&PyValue::Int(24)));
    }

    #[test]
    fn literals() {
        let m = ModelString::parse(
            r#"X(a=(1,), b=(), c=[1, 2.5, -3e-2], d="q\"x", e=None, f=(7), g=1_000,)"#,
        )
        .unwrap();
        assert_eq!(m.get("a"), Some(&PyValue::Tuple(vec![PyValue::Int(1)])));
        assert_eq!(m.get("b"), Some(&PyValue::Tuple(vec![])));
        assert_eq!(
            m.get("c"),
            Some(&PyValue::List(vec![
                PyValue::Int(1),
                PyValue::Float(2.5),
                PyValue::Float(-0.03)
            ]))
        );
        assert_eq!(m.get("d"), Some(&PyValue::Str("q\"x".into())));
        assert_eq!(m.get("e"), Some(&PyValue::None));
        assert_eq!(m.get("f"), Some(&PyValue::Int(7)));
        assert_eq!(m.get("g"), Some(&PyValue::Int(1000)));
    }

    #[test]
    fn rejects_code() {
        for s in [
            "X(a=os.system('x'))",
            "X(1)",
            "X(a=1",
            "X(a=1) + 2",
            "X(a=partial(f))",
            "X(a=1, a=2)",
            "X(a='x)",
            "",
            &format!("X(a={}1{})", "(".repeat(100), ")".repeat(100)),
        ] {
            assert!(ModelString::parse(s).is_err(), "{s}");
        }
    }

    #[test]
    fn repr() {
        assert_eq!(py_repr_f64(f64::NEG_INFINITY), "-inf");
        assert_eq!(py_repr_f64(1.0), "1");
        assert_eq!(py_repr_f64(0.5), "0.5");
    }
}
