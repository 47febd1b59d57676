//! Path templates: `$field`, `${field}`, fallback chains `${albumartist|artist}`,
//! zero padding `${tracknumber:02}`, conditional sections `[...]` that vanish
//! when a field inside them has no value, `/` between path components.
//! `$$`, `$[` and `$]` are a literal `$`, `[` and `]`. `${genre*}` fans out:
//! the track is placed once per value of the field (see
//! [`Template::render_each`]), where `$genre` joins the values.

use std::collections::HashMap;
use std::fmt;

/// The default layout of a mounted library.
pub const DEFAULT_TEMPLATE: &str =
    "${albumartist|artist}/${album}/[${disc}-][${tracknumber:02} ]${title|filename}";

#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Text(String),
    /// `fanned[i]`: `chain[i]` was written with a `*`.
    Field {
        chain: Vec<String>,
        fanned: Vec<bool>,
        pad: usize,
    },
    Section(Vec<Node>),
}

/// A parsed template.
#[derive(Debug, Clone)]
pub struct Template {
    nodes: Vec<Node>,
    source: String,
    /// Whether a reference has a `*`.
    fans_out: bool,
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
                            fanned: vec![false],
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

    /// `${a|b*:02}` after the `${`.
    fn braced(&mut self, open: usize) -> Result<Node, TemplateError> {
        let mut chain = Vec::new();
        let mut fanned = Vec::new();
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
            let star = self.peek() == Some('*');
            if star {
                self.bump();
            }
            fanned.push(star);
            match self.bump() {
                Some('|') => continue,
                Some('}') => {
                    return Ok(Node::Field {
                        chain,
                        fanned,
                        pad: 0,
                    })
                }
                Some(':') => {
                    let at = self.pos;
                    let digits = self.name();
                    let pad = match digits.parse::<usize>() {
                        Ok(n) if n <= 16 && digits.chars().all(|c| c.is_ascii_digit()) => n,
                        _ => return self.err(at, "expected a padding width such as 02 after ':'"),
                    };
                    return match self.bump() {
                        Some('}') => Ok(Node::Field { chain, fanned, pad }),
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

    /// A field's values one by one, for `${field*}`.
    fn values(&self, field: &str) -> Vec<String> {
        self.get(field).into_iter().collect()
    }
}

/// The most places a track's fanned-out fields give it in one view: a
/// track with hundreds of values (a tag holding a whole list) is placed
/// under its first ones.
pub const MAX_FAN_OUT: usize = 32;

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
            fans_out: src.contains('*') && has_fanned_reference(&nodes),
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
        render_nodes(&self.nodes, fields, Some(fallbacks), &[], &mut out);
        out
    }

    /// Every path a track has: one per combination of the values of its
    /// fanned-out fields (`${genre*}`), each field taking one value at a
    /// time, at most [`MAX_FAN_OUT`], without repeats; one path when the
    /// template fans nothing out.
    pub fn render_each(&self, fields: &dyn Fields, fallbacks: &Fallbacks) -> Vec<String> {
        if !self.fans_out {
            return vec![self.render(fields, fallbacks)];
        }
        let mut combinations: Vec<Vec<(String, String)>> = vec![Vec::new()];
        for field in self.fanned_fields(fields) {
            let values = fields.values(&field);
            let values: Vec<&String> = values.iter().filter(|v| !v.trim().is_empty()).collect();
            if values.is_empty() {
                continue;
            }
            let field = &field;
            combinations = combinations
                .iter()
                .flat_map(|chosen| {
                    values.iter().map(move |v| {
                        let mut next = chosen.clone();
                        next.push((field.clone(), v.to_string()));
                        next
                    })
                })
                .take(MAX_FAN_OUT)
                .collect();
        }
        let mut paths: Vec<String> = Vec::with_capacity(combinations.len());
        for chosen in &combinations {
            let mut out = String::new();
            render_nodes(&self.nodes, fields, Some(fallbacks), chosen, &mut out);
            if !paths.contains(&out) {
                paths.push(out);
            }
        }
        paths
    }

    /// The fields a track's paths fan out over: in each reference with a
    /// `*`, the field the chain takes its value from, if written with one.
    fn fanned_fields(&self, fields: &dyn Fields) -> Vec<String> {
        fn collect(nodes: &[Node], fields: &dyn Fields, out: &mut Vec<String>) {
            for node in nodes {
                match node {
                    Node::Text(_) => {}
                    Node::Section(inner) => collect(inner, fields, out),
                    Node::Field { chain, fanned, .. } if fanned.contains(&true) => {
                        let source = (chain.iter().zip(fanned))
                            .find(|(f, _)| fields.get(f).is_some_and(|v| !v.trim().is_empty()));
                        if let Some((field, true)) = source {
                            if !out.contains(field) {
                                out.push(field.clone());
                            }
                        }
                    }
                    Node::Field { .. } => {}
                }
            }
        }
        let mut out = Vec::new();
        collect(&self.nodes, fields, &mut out);
        out
    }
}

/// Appends the rendering of `nodes`; returns false if a field had no value
/// (a section then discards what it rendered). Inside sections no fallback
/// applies.
/// `chosen` holds the one value each fanned-out field takes here.
fn render_nodes(
    nodes: &[Node],
    fields: &dyn Fields,
    fallbacks: Option<&Fallbacks>,
    chosen: &[(String, String)],
    out: &mut String,
) -> bool {
    let mut complete = true;
    for node in nodes {
        match node {
            Node::Text(t) => out.push_str(t),
            Node::Section(inner) => {
                let mut buf = String::new();
                if render_nodes(inner, fields, None, chosen, &mut buf) {
                    out.push_str(&buf);
                }
            }
            Node::Field { chain, fanned, pad } => {
                let value = (chain.iter().zip(fanned)).find_map(|(f, &star)| {
                    let one = star
                        .then(|| chosen.iter().find(|(c, _)| c == f))
                        .flatten()
                        .map(|(_, v)| v.clone());
                    one.or_else(|| fields.get(f)).filter(|v| !v.trim().is_empty())
                });
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

fn has_fanned_reference(nodes: &[Node]) -> bool {
    nodes.iter().any(|node| match node {
        Node::Text(_) => false,
        Node::Field { fanned, .. } => fanned.contains(&true),
        Node::Section(inner) => has_fanned_reference(inner),
    })
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

    /// Fields with several values each.
    struct Multi(Vec<(&'static str, &'static str)>);

    impl Fields for Multi {
        fn get(&self, field: &str) -> Option<String> {
            let values = self.values(field);
            (!values.is_empty()).then(|| values.join(", "))
        }

        fn values(&self, field: &str) -> Vec<String> {
            (self.0.iter())
                .filter(|(k, _)| *k == field)
                .map(|(_, v)| v.to_string())
                .collect()
        }
    }

    #[test]
    fn a_starred_field_fans_out_over_its_values_and_a_plain_one_joins_them() {
        let t = Template::parse("${genre*}/$genre - ${title}").unwrap();
        let track = Multi(vec![("genre", "Jazz"), ("genre", "Soul"), ("title", "So What")]);
        assert_eq!(
            t.render_each(&track, &Fallbacks::standard()),
            ["Jazz/Jazz, Soul - So What", "Soul/Jazz, Soul - So What"]
        );
        let chain = Template::parse("${albumartist*|artist*}/x").unwrap();
        let only_artists = Multi(vec![("artist", "A"), ("artist", "B")]);
        assert_eq!(
            chain.render_each(&only_artists, &Fallbacks::standard()),
            ["A/x", "B/x"]
        );
        let none = Multi(vec![]);
        assert_eq!(
            chain.render_each(&none, &Fallbacks::standard()),
            ["Unknown Artist/x"]
        );
        let two = Template::parse("${genre*}/${mood*}").unwrap();
        let many = Multi(vec![
            ("genre", "G1"),
            ("genre", "G2"),
            ("mood", "M1"),
            ("mood", "M2"),
        ]);
        assert_eq!(
            two.render_each(&many, &Fallbacks::default()),
            ["G1/M1", "G1/M2", "G2/M1", "G2/M2"]
        );
        let huge: Vec<(&str, &str)> = (0..100).map(|i| ("genre", &*format!("g{i}").leak())).collect();
        assert_eq!(
            Template::parse("${genre*}")
                .unwrap()
                .render_each(&Multi(huge), &Fallbacks::default())
                .len(),
            MAX_FAN_OUT
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
