//! Path templates: `$field`, `${field}`, fallback chains `${albumartist|artist}`,
//! zero padding `${tracknumber:02}`, conditional sections `[...]` that vanish
//! when a field inside them has no value, `/` between path components.
//! `$$`, `$[` and `$]` are a literal `$`, `[` and `]`.

use std::collections::HashMap;
use std::fmt;

/// The default layout of a mounted library.
pub const DEFAULT_TEMPLATE: &str =
    "${albumartist|artist}/${album}/[${disc}-][${tracknumber:02} ]${title|filename}";

#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Text(String),
    Field { chain: Vec<String>, pad: usize },
    Section(Vec<Node>),
}

/// A parsed template.
#[derive(Debug, Clone)]
pub struct Template {
    nodes: Vec<Node>,
    source: String,
}

/// A malformed template, with the byte column of the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    pub column: usize,
    pub message: String,
    pub template: String,
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let caret_at = self.template[..self.column.min(self.template.len())]
            .chars()
            .count();
        write!(
            f,
            "bad template at column {}: {}\n  {}\n  {}^",
            caret_at + 1,
            self.message,
            self.template,
            " ".repeat(caret_at)
        )
    }
}

impl std::error::Error for TemplateError {}

fn is_field_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

struct Parser<'a> {
    src: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn err<T>(&self, column: usize, message: impl Into<String>) -> Result<T, TemplateError> {
        Err(TemplateError {
            column,
            message: message.into(),
            template: self.src.to_string(),
        })
    }

    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    /// Parses until the end, or until `]` when inside a section.
    fn nodes(&mut self, in_section: Option<usize>) -> Result<Vec<Node>, TemplateError> {
        let mut nodes = Vec::new();
        let mut text = String::new();
        let flush = |text: &mut String, nodes: &mut Vec<Node>| {
            if !text.is_empty() {
                nodes.push(Node::Text(std::mem::take(text)));
            }
        };
        loop {
            let at = self.pos;
            match self.bump() {
                None => {
                    if let Some(open) = in_section {
                        return self.err(open, "'[' is never closed with ']'");
                    }
                    break;
                }
                Some(']') => {
                    if in_section.is_none() {
                        return self.err(at, "']' without a matching '[' (write $] for a literal ])");
                    }
                    break;
                }
                Some('[') => {
                    flush(&mut text, &mut nodes);
                    let inner = self.nodes(Some(at))?;
                    nodes.push(Node::Section(inner));
                }
                Some('$') => match self.peek() {
                    Some(c @ ('$' | '[' | ']')) => {
                        self.bump();
                        text.push(c);
                    }
                    Some('{') => {
                        self.bump();
                        flush(&mut text, &mut nodes);
                        nodes.push(self.braced(at)?);
                    }
                    Some(c) if is_field_char(c) => {
                        flush(&mut text, &mut nodes);
                        let name = self.name();
                        nodes.push(Node::Field {
                            chain: vec![name.to_lowercase()],
                            pad: 0,
                        });
                    }
                    _ => return self.err(at, "'$' must be followed by a field name, '{', '$', '[' or ']'"),
                },
                Some(c) => text.push(c),
            }
        }
        flush(&mut text, &mut nodes);
        Ok(nodes)
    }

    fn name(&mut self) -> String {
        let start = self.pos;
        while self.peek().is_some_and(is_field_char) {
            self.bump();
        }
        self.src[start..self.pos].to_string()
    }

    /// `${a|b:02}` after the `${`.
    fn braced(&mut self, open: usize) -> Result<Node, TemplateError> {
        let mut chain = Vec::new();
        loop {
            let at = self.pos;
            let name = self.name();
            if name.is_empty() {
                return match self.peek() {
                    None => self.err(open, "'${' is never closed with '}'"),
                    Some(c) => self.err(at, format!("expected a field name, found {c:?}")),
                };
            }
            chain.push(name.to_lowercase());
            match self.bump() {
                Some('|') => continue,
                Some('}') => return Ok(Node::Field { chain, pad: 0 }),
                Some(':') => {
                    let at = self.pos;
                    let digits = self.name();
                    let pad = match digits.parse::<usize>() {
                        Ok(n) if n <= 16 && digits.chars().all(|c| c.is_ascii_digit()) => n,
                        _ => return self.err(at, "expected a padding width such as 02 after ':'"),
                    };
                    return match self.bump() {
                        Some('}') => Ok(Node::Field { chain, pad }),
                        _ => self.err(self.pos, "expected '}' after the padding width"),
                    };
                }
                None => return self.err(open, "'${' is never closed with '}'"),
                Some(c) => {
                    return self.err(at + name.len(), format!("unexpected {c:?} in a field reference"))
                }
            }
        }
    }
}

/// Values a template is rendered with: a field's values (joined with ", "
/// when there are several), or nothing.
pub trait Fields {
    fn get(&self, field: &str) -> Option<String>;
}

impl Fields for HashMap<String, String> {
    fn get(&self, field: &str) -> Option<String> {
        HashMap::get(self, field).cloned()
    }
}

/// What to use when a field has no value (outside conditional sections).
#[derive(Debug, Clone, Default)]
pub struct Fallbacks {
    pub per_field: HashMap<String, String>,
    pub default: Option<String>,
}

impl Fallbacks {
    /// The built-in fallbacks: unknown artist and album names.
    pub fn standard() -> Fallbacks {
        let per_field = [
            ("albumartist", "Unknown Artist"),
            ("artist", "Unknown Artist"),
            ("album", "Unknown Album"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        Fallbacks {
            per_field,
            default: None,
        }
    }

    fn for_chain(&self, chain: &[String]) -> Option<&str> {
        chain
            .iter()
            .find_map(|f| self.per_field.get(f))
            .or(self.default.as_ref())
            .map(String::as_str)
    }
}

impl Template {
    pub fn parse(src: &str) -> Result<Template, TemplateError> {
        let mut p = Parser { src, pos: 0 };
        let nodes = p.nodes(None)?;
        if nodes.is_empty() {
            return p.err(0, "the template is empty");
        }
        Ok(Template {
            nodes,
            source: src.to_string(),
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// Each field reference's chain (`${albumartist|artist}`: both
    /// names), in order, those in sections too.
    pub fn chains(&self) -> Vec<&[String]> {
        fn collect<'a>(nodes: &'a [Node], out: &mut Vec<&'a [String]>) {
            for node in nodes {
                match node {
                    Node::Text(_) => {}
                    Node::Field { chain, .. } => out.push(chain),
                    Node::Section(inner) => collect(inner, out),
                }
            }
        }
        let mut out = Vec::new();
        collect(&self.nodes, &mut out);
        out
    }

    /// The fields the template names, each once, in order.
    pub fn fields(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for name in self.chains().into_iter().flatten() {
            if !out.contains(&name.as_str()) {
                out.push(name);
            }
        }
        out
    }

    /// Renders to a path; field values have `/` replaced so that only the
    /// template's own slashes separate components. Components are not yet
    /// sanitized (see `tree::sanitize_component`).
    pub fn render(&self, fields: &dyn Fields, fallbacks: &Fallbacks) -> String {
        let mut out = String::new();
        render_nodes(&self.nodes, fields, Some(fallbacks), &mut out);
        out
    }
}

/// Appends the rendering of `nodes`; returns false if a field had no value
/// (a section then discards what it rendered). Inside sections no fallback
/// applies.
fn render_nodes(
    nodes: &[Node],
    fields: &dyn Fields,
    fallbacks: Option<&Fallbacks>,
    out: &mut String,
) -> bool {
    let mut complete = true;
    for node in nodes {
        match node {
            Node::Text(t) => out.push_str(t),
            Node::Section(inner) => {
                let mut buf = String::new();
                if render_nodes(inner, fields, None, &mut buf) {
                    out.push_str(&buf);
                }
            }
            Node::Field { chain, pad } => {
                let value = chain
                    .iter()
                    .find_map(|f| fields.get(f).filter(|v| !v.trim().is_empty()));
                let value = match value {
                    Some(v) => v,
                    None => {
                        complete = false;
                        match fallbacks.and_then(|fb| fb.for_chain(chain)) {
                            Some(v) => v.to_string(),
                            None => continue,
                        }
                    }
                };
                out.push_str(&pad_number(&value, *pad).replace('/', "_"));
            }
        }
    }
    complete
}

/// Zero-pads a value that is a plain number, or the number of a "3/12"
/// (track 3 of 12, as ID3 writes it); anything else (`A3`) is kept.
fn pad_number(v: &str, width: usize) -> String {
    let t = v.trim();
    let number = t.split_once('/').map_or(t, |(n, _)| n.trim());
    if width > 0 && !number.is_empty() && number.chars().all(|c| c.is_ascii_digit()) {
        format!("{number:0>width$}")
    } else {
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn fields(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn render(t: &str, pairs: &[(&str, &str)]) -> String {
        Template::parse(t)
            .unwrap()
            .render(&fields(pairs), &Fallbacks::standard())
    }

    #[test]
    fn the_fields_named_are_listed_once_in_order() {
        let t = Template::parse("${albumartist|artist}/$album/[${disc}-]${title|filename} $artist").unwrap();
        assert_eq!(
            t.fields(),
            ["albumartist", "artist", "album", "disc", "title", "filename"]
        );
        assert_eq!(t.chains().len(), 5);
        assert_eq!(t.chains()[0], ["albumartist", "artist"]);
    }

    #[test]
    fn fields_chains_padding_and_sections() {
        assert_eq!(
            render("$artist - ${title}", &[("artist", "A"), ("title", "T")]),
            "A - T"
        );
        assert_eq!(render("${albumartist|artist}", &[("artist", "A")]), "A");
        assert_eq!(render("${tracknumber:02}", &[("tracknumber", "3")]), "03");
        assert_eq!(render("${tracknumber:03}", &[("tracknumber", "A3")]), "A3");
        assert_eq!(render("${tracknumber:02}", &[("tracknumber", "3/12")]), "03");
        assert_eq!(render("${tracknumber}", &[("tracknumber", "3/12")]), "3_12");
        assert_eq!(render("${tracknumber:02}", &[("tracknumber", "A/B")]), "A_B");
        assert_eq!(render("[CD $discnumber/]x", &[]), "x");
        assert_eq!(render("[CD $discnumber/]x", &[("discnumber", "2")]), "CD 2/x");
        assert_eq!(render("$$5 $[x$]", &[]), "$5 [x]");
        assert_eq!(render("$artist", &[("artist", "AC/DC")]), "AC_DC");
        assert_eq!(render("${album}", &[]), "Unknown Album");
        assert_eq!(render("[${album}]", &[]), "");
    }

    #[test]
    fn default_template_renders_a_real_track() {
        let f = [
            ("albumartist", "AA"),
            ("album", "Al"),
            ("tracknumber", "7"),
            ("title", "T"),
            ("disc", "2"),
        ];
        assert_eq!(render(DEFAULT_TEMPLATE, &f), "AA/Al/2-07 T");
        assert_eq!(
            render(DEFAULT_TEMPLATE, &[("filename", "f")]),
            "Unknown Artist/Unknown Album/f"
        );
    }

    #[test]
    fn errors_point_at_the_problem() {
        let e = Template::parse("$artist/${album").unwrap_err();
        assert_eq!(e.column, 8);
        assert!(e.to_string().contains("never closed"), "{e}");
        assert_eq!(Template::parse("a]").unwrap_err().column, 1);
        assert_eq!(Template::parse("[abc").unwrap_err().column, 0);
        assert!(Template::parse("${a:x}").is_err());
        assert!(Template::parse("$ x").is_err());
        assert!(Template::parse("").is_err());
        assert!(Template::parse("${a|}").is_err());
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in ".{0,40}") {
            if let Ok(t) = Template::parse(&s) {
                let _ = t.render(&fields(&[("artist", "x")]), &Fallbacks::standard());
            }
        }

        #[test]
        fn literal_text_renders_as_itself(s in "[a-zA-Z0-9 ./_-]{1,40}") {
            prop_assert_eq!(render(&s, &[]), s);
        }

        #[test]
        fn values_never_add_path_components(v in ".{0,30}") {
            let out = render("$artist", &[("artist", &v)]);
            prop_assert!(!out.contains('/'));
        }
    }
}
