//! The query language's text to terms (docs/query.md). Every error names
//! the character where the query stops making sense.

use regex::Regex;

use super::fold::fold;
use super::{QueryError, Range, Term, Test};

/// One word of a query: its characters with their positions (in
/// characters from the start) and whether each was inside quotes.
#[derive(Debug, Default)]
struct Word {
    chars: Vec<(char, usize, bool)>,
    start: usize,
}

impl Word {
    fn at_pos(start: usize) -> Word {
        Word {
            chars: Vec::new(),
            start,
        }
    }

    fn text(&self) -> String {
        self.chars.iter().map(|&(c, _, _)| c).collect()
    }

    /// The position of character `i` of the word (its end when past it).
    fn at(&self, i: usize) -> usize {
        self.chars
            .get(i)
            .map_or_else(|| self.chars.last().map_or(self.start, |c| c.1 + 1), |c| c.1)
    }

    /// Where an unquoted `c` first is, from character `from`.
    fn find_unquoted(&self, c: char, from: usize) -> Option<usize> {
        (from..self.chars.len()).find(|&i| self.chars[i].0 == c && !self.chars[i].2)
    }

    fn tail(&self, from: usize) -> Word {
        Word {
            chars: self.chars[from.min(self.chars.len())..].to_vec(),
            start: self.at(from),
        }
    }
}

/// The words of a query: split at unquoted white space, quotes (`"` or
/// `'`) removed (`""` is an empty word); a lone `,` is its own word
/// (either of two queries).
fn words(text: &str) -> Result<Vec<Word>, QueryError> {
    let mut words = Vec::new();
    let mut word: Option<Word> = None;
    let mut quote: Option<(char, usize)> = None;
    for (pos, c) in text.chars().enumerate() {
        match quote {
            Some((q, _)) if c == q => quote = None,
            Some(_) => word
                .get_or_insert_with(|| Word::at_pos(pos))
                .chars
                .push((c, pos, true)),
            None if c == '"' || c == '\'' => {
                word.get_or_insert_with(|| Word::at_pos(pos));
                quote = Some((c, pos));
            }
            None if c.is_whitespace() => words.extend(word.take()),
            None => word
                .get_or_insert_with(|| Word::at_pos(pos))
                .chars
                .push((c, pos, false)),
        }
    }
    if let Some((_, at)) = quote {
        return Err(QueryError::new(at, "this quote is never closed"));
    }
    words.extend(word);
    Ok(words)
}

/// The queries `text` holds, `,` between them: each a list of terms that
/// must all match.
pub(super) fn parse(text: &str, now_secs: i64) -> Result<Vec<Vec<Term>>, QueryError> {
    let mut alternatives = vec![Vec::new()];
    for word in words(text)? {
        if word.chars.len() == 1 && word.chars[0].0 == ',' && !word.chars[0].2 {
            if alternatives.last().is_some_and(Vec::is_empty) {
                return Err(QueryError::new(
                    word.start,
                    "nothing before this `,`: it joins two queries",
                ));
            }
            alternatives.push(Vec::new());
            continue;
        }
        let term = term(&word, now_secs)?;
        alternatives.last_mut().expect("one at least").push(term);
    }
    if alternatives.len() > 1 && alternatives.last().is_some_and(Vec::is_empty) {
        return Err(QueryError::new(
            text.chars().count(),
            "nothing after the last `,`",
        ));
    }
    Ok(alternatives)
}

fn term(word: &Word, now_secs: i64) -> Result<Term, QueryError> {
    let negated =
        matches!(word.chars.first(), Some(&(c, _, false)) if c == '^' || c == '-') && word.chars.len() > 1;
    let word = if negated { word.tail(1) } else { word.tail(0) };
    let field_end = word.find_unquoted(':', 0).filter(|&i| {
        i > 0
            && word.chars[..i]
                .iter()
                .all(|&(c, _, quoted)| !quoted && is_field_char(c))
    });
    let Some(colon) = field_end else {
        return Ok(Term {
            negated,
            field: None,
            test: Test::Contains(fold(&word.text())),
        });
    };
    let field: String = word.chars[..colon]
        .iter()
        .map(|&(c, _, _)| c)
        .collect::<String>()
        .to_lowercase();
    let value = word.tail(colon + 1);
    let test = value_test(&field, &value, now_secs)?;
    Ok(Term {
        negated,
        field: Some(field),
        test,
    })
}

fn is_field_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '-'
}

fn value_test(field: &str, value: &Word, now_secs: i64) -> Result<Test, QueryError> {
    let unquoted_first = value.chars.first().filter(|c| !c.2).map(|c| c.0);
    match unquoted_first {
        None if value.chars.is_empty() => Err(QueryError::new(
            value.start,
            format!("no value after `{field}:`; `{field}:=` finds tracks where it is missing or empty"),
        )),
        Some('=') => Ok(Test::Exact(value.tail(1).text())),
        Some(':') => {
            let pattern = value.tail(1);
            Regex::new(&pattern.text()).map(Test::Regex).map_err(|e| {
                QueryError::new(
                    pattern.start,
                    format!("not a regular expression: {}", regex_error(&e)),
                )
            })
        }
        _ => match value
            .find_unquoted('.', 0)
            .filter(|&i| value.chars.get(i + 1).is_some_and(|c| c.0 == '.' && !c.2))
        {
            Some(dots) => range(field, value, dots, now_secs).map(Test::Range),
            None if field == "added" => {
                let text = value.text();
                let (from, to) = moment(&text, now_secs).ok_or_else(|| bad_moment(value.start))?;
                // A time ago alone means since then; a date, within it.
                let to = (!text.starts_with('-')).then_some(to);
                Ok(Test::Range(Range::Time(Some(from), to)))
            }
            None => Ok(Test::Contains(fold(&value.text()))),
        },
    }
}

fn regex_error(e: &regex::Error) -> String {
    // The crate's message spans lines, with a drawing of the pattern.
    e.to_string()
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// `a..b`, `a..` or `..b`: numbers, or for `added` dates and relative times.
fn range(field: &str, value: &Word, dots: usize, now_secs: i64) -> Result<Range, QueryError> {
    let low = value.chars[..dots].iter().map(|c| c.0).collect::<String>();
    let high = value.tail(dots + 2);
    let high_text = high.text();
    if low.is_empty() && high_text.is_empty() {
        return Err(QueryError::new(
            value.at(dots),
            "a range needs a bound on one side at least",
        ));
    }
    if field == "added" {
        let from = bound(&low, value.start, |t| moment(t, now_secs).map(|m| m.0))?;
        let to = bound(&high_text, high.start, |t| moment(t, now_secs).map(|m| m.1))?;
        return Ok(Range::Time(from, to));
    }
    let number = |text: &str| text.parse::<f64>().ok().filter(|n| n.is_finite());
    let from = bound(&low, value.start, number)?;
    let to = bound(&high_text, high.start, number)?;
    Ok(Range::Number(from, to))
}

/// A range's bound: None when empty, else `parse`'s value or an error at
/// `at`.
fn bound<T>(text: &str, at: usize, parse: impl Fn(&str) -> Option<T>) -> Result<Option<T>, QueryError> {
    if text.is_empty() {
        return Ok(None);
    }
    parse(text).map(Some).ok_or_else(|| {
        QueryError::new(
            at,
            format!("{text:?} is not a bound: give a number, or for `added` a date (2026-01-31) or a time ago (-30d)"),
        )
    })
}

fn bad_moment(at: usize) -> QueryError {
    QueryError::new(
        at,
        "`added` takes a date (2026, 2026-01, 2026-01-31) or a time ago (-30d, -2w, -6m, -1y)",
    )
}

/// The first and last second of a date (`2026`, `2026-01`, `2026-01-31`,
/// as UTC), or twice the second a time ago (`-30d`, `-2w`, `-6m`, `-1y`)
/// names.
fn moment(text: &str, now_secs: i64) -> Option<(i64, i64)> {
    if let Some(ago) = text.strip_prefix('-') {
        let (n, unit) = ago.split_at(ago.find(|c: char| !c.is_ascii_digit())?);
        let n: i64 = n.parse().ok()?;
        let days = match unit {
            "d" => 1,
            "w" => 7,
            "m" => 30,
            "y" => 365,
            _ => return None,
        };
        let then = now_secs.checked_sub(n.checked_mul(days * 86_400)?)?;
        return Some((then, then));
    }
    let parts: Vec<&str> = text.split('-').collect();
    let number = |s: &str, digits: usize| {
        (s.len() == digits && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<i64>().ok())
            .flatten()
    };
    let (year, month, day) = match parts.as_slice() {
        [y] => (number(y, 4)?, None, None),
        [y, m] => (number(y, 4)?, Some(number(m, 2)?), None),
        [y, m, d] => (number(y, 4)?, Some(number(m, 2)?), Some(number(d, 2)?)),
        _ => return None,
    };
    let start = utc_second(year, month.unwrap_or(1), day.unwrap_or(1))?;
    let end = match (month, day) {
        (_, Some(_)) => start + 86_400,
        (Some(12), None) => utc_second(year + 1, 1, 1)?,
        (Some(m), None) => utc_second(year, m + 1, 1)?,
        (None, _) => utc_second(year + 1, 1, 1)?,
    };
    Some((start, end - 1))
}

/// The first second of a day, in UTC; None for a day that does not exist.
fn utc_second(year: i64, month: i64, day: i64) -> Option<i64> {
    let date = jiff::civil::Date::new(
        year.try_into().ok()?,
        month.try_into().ok()?,
        day.try_into().ok()?,
    )
    .ok()?;
    Some(
        date.to_zoned(jiff::tz::TimeZone::UTC)
            .ok()?
            .timestamp()
            .as_second(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_whole_periods_in_utc() {
        assert_eq!(moment("1970", 0), Some((0, 365 * 86_400 - 1)));
        assert_eq!(moment("2026-01", 0).unwrap().0, 1_767_225_600);
        assert_eq!(
            moment("2024-02", 0).unwrap().1 - moment("2024-02", 0).unwrap().0,
            29 * 86_400 - 1
        );
        assert_eq!(moment("2026-12-31", 0).unwrap().1, 1_798_761_599);
        assert_eq!(
            moment("-2w", 1_000_000),
            Some((1_000_000 - 14 * 86_400, 1_000_000 - 14 * 86_400))
        );
        for bad in ["26", "2026-1", "2026-13", "-5x", "-d", "2026-01-01-01", ""] {
            assert_eq!(moment(bad, 0), None, "{bad}");
        }
    }

    #[test]
    fn words_split_at_unquoted_space_and_keep_commas_apart() {
        let texts = |q: &str| words(q).unwrap().iter().map(Word::text).collect::<Vec<_>>();
        assert_eq!(
            texts(r#"artist:"miles davis" kind , blue"#),
            ["artist:miles davis", "kind", ",", "blue"]
        );
        assert_eq!(texts("  a   b "), ["a", "b"]);
        assert_eq!(words("title:'open").unwrap_err().at, 6);
    }
}
