use super::*;

fn track<'a>(tags: &'a [(String, String)], added: i64) -> QueryTrack<'a> {
    QueryTrack {
        tags,
        added,
        format: "flac",
        backing_path: "/music/a.flac",
    }
}

fn tags(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

const NOW: i64 = 1_790_000_000;

fn matches(query: &str, t: &[(&str, &str)]) -> bool {
    Query::parse(query, NOW)
        .unwrap()
        .matches(&track(&tags(t), NOW - 86_400))
}

#[test]
fn bare_words_look_in_the_common_fields_folded() {
    let t = [("artist", "Beyoncé"), ("title", "Halo"), ("genre", "Pop")];
    assert!(matches("beyonce", &t));
    assert!(matches("HALO", &t));
    assert!(!matches("pop", &t), "genre is not a common field");
    assert!(matches("", &t));
}

#[test]
fn fields_exact_regex_and_missing() {
    let t = [
        ("artist", "Miles Davis"),
        ("genre", "Jazz"),
        ("genre", "Cool"),
        ("albumartist", ""),
    ];
    assert!(matches("genre:cool", &t), "any value of a multi-valued field");
    assert!(
        !matches("artist:=Miles Davis", &t),
        "unquoted, Davis is a word of its own"
    );
    assert!(matches("artist:=\"Miles Davis\"", &t));
    assert!(!matches("artist:=miles davis", &t), "exact is exact");
    assert!(matches("artist::^Mi.*s$", &t));
    assert!(!matches("artist::^mi", &t));
    assert!(matches("albumartist:=", &t), "empty");
    assert!(matches("composer:=", &t), "missing");
    assert!(!matches("genre:=", &t));
    assert!(matches("-composer:jazz", &t));
    assert!(matches("^genre:rock", &t));
    assert!(!matches("-genre:jazz", &t));
}

#[test]
fn ranges_of_numbers_years_and_added_times() {
    let t = [("date", "1959-08-17"), ("tracknumber", "3/12")];
    assert!(matches("year:1955..1965", &t));
    assert!(matches("year:1959", &t));
    assert!(!matches("year:1960..", &t));
    assert!(matches("year:..1959", &t));
    assert!(matches("tracknumber:3..3", &t));
    assert!(
        matches("year:2001", &[("year", "2001")]),
        "year where there is no date"
    );
    assert!(matches("added:-2d..", &t));
    assert!(!matches("added:..-2d", &t));
    assert!(matches("added:-7d", &t));
    assert!(matches("added:2026", &t) == (NOW - 86_400 >= 1_767_225_600));
}

#[test]
fn all_terms_must_match_and_commas_join_alternatives() {
    let t = [("artist", "Adele"), ("genre", "Soul")];
    assert!(matches("adele genre:soul", &t));
    assert!(!matches("adele genre:jazz", &t));
    assert!(matches("genre:jazz , adele", &t));
    assert!(matches("beyonce , adele", &t));
    assert!(!matches("beyonce , madonna", &t));
}

#[test]
fn malformed_queries_point_at_the_offending_character() {
    let error = |q: &str| Query::parse(q, NOW).unwrap_err();
    assert_eq!(error("title:\"open").at, 6);
    assert_eq!(error("genre:jazz artist::(unclosed").at, 19);
    assert_eq!(error("year:abc..1990").at, 5);
    assert_eq!(error("year:1990..x").at, 11);
    assert_eq!(error("year:..").at, 5);
    assert_eq!(error("added:yesterday").at, 6);
    assert_eq!(error(", adele").at, 0);
    assert_eq!(error("adele ,").at, 7);
    assert_eq!(error("genre:").at, 6);
    assert!(error("year:abc..1990").to_string().contains("at character 6"));
    assert_eq!(
        error("title:\"open").pointing_into("title:\"open"),
        "  title:\"open\n        ^"
    );
}

proptest::proptest! {
    #[test]
    fn any_text_parses_or_points_inside_it(text in "[ -~ÉéüÜ,:=.^\"'-]{0,40}") {
        match Query::parse(&text, NOW) {
            Ok(q) => {
                q.matches(&track(&tags(&[("artist", "x"), ("date", "2001")]), 0));
            }
            Err(e) => proptest::prop_assert!(e.at <= text.chars().count(), "{e} in {text:?}"),
        }
    }
}
