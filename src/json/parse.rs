//! PURE: the skimming parser, straight into a [`Node`] tree, driven by a [`Skim`] table its
//! caller passes (it knows no Kubernetes: admission's table is `admission::skim`).
//!
//! Why not a serde `Deserializer`: on a 200 KB review, `serde_json` and `sonic-rs` both spent
//! more time visiting tokens into a tree than the whole review may take, and `sonic-rs`'s own
//! tree turns edited objects into hash maps (losing member order, so patches would not be
//! byte-stable). This parser does one pass over the bytes (the tokenizer finds string ends eight
//! bytes at a time), borrows every string without escapes, and builds nothing for what the table
//! says stays text: such a value is checked and kept as its text ([`Node::Raw`]), and the
//! canonical judge ([`canonical::skim`]) notes on the way whether that text is canonical JSON.
//!
//! A name that occurs twice in one object keeps its last value, where the first stood (as
//! `serde_json`, Go's `encoding/json` and so kube-apiserver read it).
//!
//! Anything it does not take (invalid UTF-8 or JSON, nesting deeper than [`MAX_DEPTH`], a number
//! out of range) is an `Err`, and the caller falls back to `serde_json`, which either parses the
//! body after all or says what is wrong with it.

use std::borrow::Cow;

use super::lex::{self, Escapes, Lexer, Reads};
pub use super::lex::{MAX_DEPTH, Refused};
use super::{Map, Node, Skimmed, canonical};

/// How much of a value to build: a table, one entry per level, that the caller owns.
#[derive(Debug, Clone, Copy)]
pub enum Skim {
    /// Build the whole value.
    Full,
    /// Keep the value as its JSON text.
    Raw,
    /// An object: each member `fields` names is built as its entry says, the others as `others`
    /// says. (A value that is not an object is built in full.)
    Object {
        fields: &'static [(&'static str, Skim)],
        others: Others,
    },
    /// A list: each element built as the entry says.
    List(&'static Skim),
    /// A list whose elements stay text, but those whose text holds the needle, or a `\u` escape
    /// that could spell it: so an element left as text never holds it (reading such an element
    /// finds nothing, which is right only when the reader looks for the needle).
    Sift(&'static str),
}

/// How the members an [`Skim::Object`] does not name are built.
#[derive(Debug, Clone, Copy)]
pub enum Others {
    Full,
    Raw,
    /// In full when the name passes, else as text.
    FullIf(fn(&str) -> bool),
}

impl Skim {
    /// How the member `key` of an object of this skim is built.
    fn member(&self, key: &str) -> &Skim {
        match self {
            Skim::Object { fields, others } => match fields.iter().find(|(name, _)| *name == key) {
                Some((_, skim)) => skim,
                None => match others {
                    Others::Full => &Skim::Full,
                    Others::Raw => &Skim::Raw,
                    Others::FullIf(keep) if keep(key) => &Skim::Full,
                    Others::FullIf(_) => &Skim::Raw,
                },
            },
            _ => &Skim::Full,
        }
    }

    /// How the elements of a list of this skim are built.
    fn element(&self) -> &Skim {
        match self {
            Skim::List(element) => element,
            _ => &Skim::Full,
        }
    }
}

/// Parse JSON `body` (an AdmissionReview, say), skimming as `skim` says.
pub fn parse_bytes<'a>(body: &'a [u8], skim: &Skim) -> Result<Node<'a>, Refused> {
    parse(std::str::from_utf8(body).map_err(|_| Refused)?, skim, "")
}

/// Parse JSON `text`, skimming as `skim` says; `at` names where the text sits, for the path a
/// skimmed value records (debug builds only).
pub fn parse<'a>(text: &'a str, skim: &Skim, at: &str) -> Result<Node<'a>, Refused> {
    let mut p = Parser {
        lx: Lexer::new(text),
        trail: Trail::new(at),
    };
    let node = p.value(skim, 0)?;
    match p.lx.at_end() {
        true => Ok(node),
        false => Err(Refused),
    }
}

struct Parser<'a> {
    lx: Lexer<'a>,
    trail: Trail,
}

impl<'a> Reads<'a> for Parser<'a> {
    fn lx(&mut self) -> &mut Lexer<'a> {
        &mut self.lx
    }
}

impl<'a> Parser<'a> {
    /// The next value, built as `skim` says.
    fn value(&mut self, skim: &Skim, depth: usize) -> Result<Node<'a>, Refused> {
        if depth > MAX_DEPTH {
            return Err(Refused);
        }
        self.lx.space();
        match self.lx.peek().ok_or(Refused)? {
            b'{' => self.object(skim, depth),
            b'[' => match skim {
                Skim::Sift(needle) => self.sift(needle, depth),
                _ => self.array(skim.element(), depth),
            },
            b'"' => self.lx.string().map(Node::String),
            b't' => self.lx.literal("true").map(|()| Node::Bool(true)),
            b'f' => self.lx.literal("false").map(|()| Node::Bool(false)),
            b'n' => self.lx.literal("null").map(|()| Node::Null),
            _ => self.lx.number().map(Node::Number),
        }
    }

    fn object(&mut self, skim: &Skim, depth: usize) -> Result<Node<'a>, Refused> {
        let mut members = Vec::new();
        lex::elements(self, |p, key| {
            let key = key.ok_or(Refused)?;
            let value = p.member(skim.member(&key), &key, depth + 1)?;
            members.push((key, value));
            Ok(())
        })?;
        Ok(Node::Object(Map::parsed(members)))
    }

    /// A member named `key`, built as `skim` says.
    fn member(&mut self, skim: &Skim, key: &str, depth: usize) -> Result<Node<'a>, Refused> {
        match skim {
            Skim::Raw => self.raw(depth, self.trail.at(key)),
            // Nothing below is skimmed: no path to keep.
            Skim::Full => self.value(skim, depth),
            _ => {
                self.trail.enter(key);
                let value = self.value(skim, depth);
                self.trail.leave();
                value
            }
        }
    }

    fn array(&mut self, element: &Skim, depth: usize) -> Result<Node<'a>, Refused> {
        let mut items = Vec::new();
        self.trail.enter("[]");
        let walked = lex::elements(self, |p, _| {
            items.push(p.value(element, depth + 1)?);
            Ok(())
        });
        self.trail.leave();
        walked.map(|()| Node::Array(items))
    }

    /// A list whose elements stay text unless they may hold `needle` (see [`Skim::Sift`]): a
    /// container's env list can hold thousands of entries, and admission only looks for one. One
    /// search over the whole list tells whether any entry holds the needle.
    fn sift(&mut self, needle: &str, depth: usize) -> Result<Node<'a>, Refused> {
        let start = self.lx.at;
        let mut items = Vec::new();
        // The entries with a `\u` escape, by index.
        let mut unicode = Vec::new();
        self.lx.elements(|lx, _| {
            let (text, canonical) = canonical::skim(lx, depth + 1)?;
            if lx.escapes == Escapes::Unicode {
                unicode.push(items.len());
            }
            items.push(Node::Raw {
                text: Cow::Borrowed(text),
                canonical,
                at: Skimmed::sifted(),
            });
            Ok(())
        })?;
        let holds = |text: &str| memchr::memmem::find(text.as_bytes(), needle.as_bytes()).is_some();
        let named = holds(&self.lx.text[start..self.lx.at]);
        if named || !unicode.is_empty() {
            for (i, item) in items.iter_mut().enumerate() {
                if let Node::Raw {
                    text: Cow::Borrowed(text),
                    ..
                } = *item
                    && (unicode.binary_search(&i).is_ok() || (named && holds(text)))
                {
                    *item = parse(text, &Skim::Full, "")?;
                }
            }
        }
        Ok(Node::Array(items))
    }

    /// Check the next value and keep its text.
    fn raw(&mut self, depth: usize, at: Skimmed) -> Result<Node<'a>, Refused> {
        let (text, canonical) = canonical::skim(&mut self.lx, depth)?;
        Ok(Node::Raw {
            text: Cow::Borrowed(text),
            canonical,
            at,
        })
    }
}

/// Where the parser is inside the skim table, to name a skimmed value's path in debug builds
/// (`request.object.spec.template.spec.containers[].resources`); nothing in release builds.
#[derive(Debug, Default)]
struct Trail {
    #[cfg(debug_assertions)]
    steps: Vec<String>,
}

impl Trail {
    fn new(_at: &str) -> Self {
        Self {
            #[cfg(debug_assertions)]
            steps: match _at {
                "" => Vec::new(),
                at => vec![at.to_string()],
            },
        }
    }

    fn enter(&mut self, _step: &str) {
        #[cfg(debug_assertions)]
        self.steps.push(_step.to_string());
    }

    fn leave(&mut self) {
        #[cfg(debug_assertions)]
        self.steps.pop();
    }

    /// The path of the member `_key` here.
    fn at(&self, _key: &str) -> Skimmed {
        #[cfg(debug_assertions)]
        {
            let mut path = String::new();
            for step in self.steps.iter().map(String::as_str).chain([_key]) {
                if !path.is_empty() && step != "[]" {
                    path.push('.');
                }
                path.push_str(step);
            }
            Skimmed::at(path)
        }
        #[cfg(not(debug_assertions))]
        Skimmed::default()
    }
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
