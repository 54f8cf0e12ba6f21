//! The metric names a PromQL expression (a panel's, a variable's, a rule's) selects, and those
//! of them nobody exports: what the live Prometheus test compares.

use std::collections::BTreeSet;

/// PromQL words that are no metric: aggregations, operators, modifiers, literals.
const KEYWORDS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "atan2",
    "inf",
    "nan",
];

/// Clauses whose parenthesised list holds label names, not metrics.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The metric names a PromQL expression selects: every identifier that is not in a string, a
/// label matcher `{…}`, a range or subquery `[…]`, a label list (`by (…)`, `on (…)`…), and is
/// neither a function (followed by `(`), a keyword nor part of a number.
pub(super) fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut words: Vec<String> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => {
                i += 1;
                while i < chars.len() && chars[i] != c {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
            }
            '{' | '[' => {
                let close = if c == '{' { '}' } else { ']' };
                while i < chars.len() && chars[i] != close {
                    i += 1;
                }
                i += 1;
            }
            '(' if words
                .last()
                .is_some_and(|w| LABEL_LISTS.contains(&w.as_str())) =>
            {
                while i < chars.len() && chars[i] != ')' {
                    i += 1;
                }
                i += 1;
                words.push(")".into());
            }
            '0'..='9' | '.' => {
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || ".+-_".contains(chars[i]))
                {
                    // An exponent's sign belongs to the number; any other sign ends it.
                    if "+-".contains(chars[i]) && !matches!(chars[i - 1], 'e' | 'E') {
                        break;
                    }
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let next = chars[i..].iter().find(|c| !c.is_whitespace());
                let keyword = KEYWORDS.contains(&word.to_ascii_lowercase().as_str());
                if next != Some(&'(') && !keyword {
                    names.insert(word.clone());
                }
                words.push(word.to_ascii_lowercase());
            }
            _ => {
                if !c.is_whitespace() {
                    words.push(c.to_string());
                }
                i += 1;
            }
        }
    }
    names
}

/// The metric names of a Grafana variable's query: `label_values(SELECTOR, label)` names the
/// metrics of its selector (its label is none); anything else is PromQL.
pub(super) fn variable_metric_names(query: &str) -> BTreeSet<String> {
    match query
        .trim()
        .strip_prefix("label_values(")
        .and_then(|inner| inner.rsplit_once(','))
    {
        Some((selector, _label)) => metric_names(selector),
        None => metric_names(query),
    }
}

#[test]
fn metric_names_are_taken_from_expressions_and_nothing_else() {
    // Pins down the extraction the Prometheus test relies on: functions, label names in
    // matchers and in `by`/`on` lists, strings, durations, Grafana's variables and numbers are
    // not metrics; every selected metric is one, however it is written.
    let names = |expr: &str| metric_names(expr).into_iter().collect::<Vec<_>>();
    assert_eq!(
        names(
            "histogram_quantile(0.99, sum by (job, le) (rate(x_seconds_bucket{job=~\"$job\", le!=\"1e3\"}[$__rate_interval])))"
        ),
        ["x_seconds_bucket"]
    );
    assert_eq!(
        names(
            "max by (job, instance) (a) == 0\nunless on (job, instance)\nmax by(job,instance)(b{reason=\"draining\"}) == 1"
        ),
        ["a", "b"]
    );
    assert_eq!(
        names("sum(rate(c_total[5m] offset 1h)) / ignoring(code) group_left(le) d > 1e-3 * 2"),
        ["c_total", "d"]
    );
    assert_eq!(names("increase(servce_total[15m]) > 3"), ["servce_total"]);
    assert_eq!(names("{__name__=\"x\"} or vector(0)"), Vec::<String>::new());
    assert_eq!(
        variable_metric_names("label_values(y_total{job=~\"$job\"}, instance)")
            .into_iter()
            .collect::<Vec<_>>(),
        ["y_total"]
    );
    // And a name nobody exports is one the comparison reports.
    let exported: BTreeSet<String> = ["a".to_owned()].into();
    assert_eq!(
        unexported(&exported, &names("a + servce_total")),
        ["servce_total"]
    );
}

/// The names of `wanted` that are not in `exported`.
pub(super) fn unexported(exported: &BTreeSet<String>, wanted: &[String]) -> Vec<String> {
    wanted
        .iter()
        .filter(|name| !exported.contains(*name))
        .cloned()
        .collect()
}
