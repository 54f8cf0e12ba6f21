//! "No token leaked": every real token of the run searched for in the texts the run collected
//! (log lines, metric scrapes, Redis keys and values) and in the history itself. It owns that
//! search; the tokens come from the run's memory and are never written anywhere, and a leak is
//! reported by the token's id, the text's source and its line, never by the token.

use aho_corasick::AhoCorasick;

use crate::history::{Event, TokenId};
use crate::report::{EventRef, Invariant, Report, Violation};

/// One text the run collected, by where it came from.
#[derive(Debug, Clone, Copy)]
pub struct Collected<'a> {
    /// Where it came from: `log node-1`, `metrics sidecar`, `redis keys`...
    pub source: &'a str,
    /// The text, as collected.
    pub text: &'a str,
}

/// The run's real tokens, each with the id the history names it by. Its `Debug` shows the
/// ids only.
#[derive(Clone, Default)]
pub struct Secrets {
    ids: Vec<TokenId>,
    tokens: Vec<String>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets")
            .field("ids", &self.ids)
            .field("tokens", &"[redacted]")
            .finish()
    }
}

impl Secrets {
    /// No tokens yet.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a token under the id the history names it by. Empty tokens are ignored.
    pub fn insert(&mut self, id: TokenId, token: impl Into<String>) {
        let token = token.into();
        if !token.is_empty() {
            self.ids.push(id);
            self.tokens.push(token);
        }
    }

    /// How many tokens it holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether it holds none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

/// Searches every text, and every event of the history as its line, for every token; each
/// line that holds one is a [`Invariant::TokenLeaked`] violation added to `report`.
///
/// # Panics
///
/// Never for tokens within the resolver's 4096-byte limit: the automaton is built once over
/// them.
pub fn check_leaks(
    report: &mut Report,
    secrets: &Secrets,
    events: &[Event],
    texts: &[Collected<'_>],
) {
    if secrets.is_empty() {
        return;
    }
    let automaton = AhoCorasick::new(&secrets.tokens).expect("tokens build an automaton");
    for (i, event) in events.iter().enumerate() {
        let line = event.to_line();
        if let Some(found) = automaton.find(&line) {
            report.push(Violation {
                invariant: Invariant::TokenLeaked,
                events: vec![EventRef {
                    line: i + 1,
                    t_us: event.t_us,
                }],
                delay: None,
                bound: None,
                explanation: format!(
                    "token {} is written in the history",
                    secrets.ids[found.pattern().as_usize()].as_str()
                ),
            });
        }
    }
    for text in texts {
        for (n, line) in text.text.lines().enumerate() {
            if let Some(found) = automaton.find(line) {
                report.push(Violation {
                    invariant: Invariant::TokenLeaked,
                    events: Vec::new(),
                    delay: None,
                    bound: None,
                    explanation: format!(
                        "token {} is in {}, line {}",
                        secrets.ids[found.pattern().as_usize()].as_str(),
                        text.source,
                        n + 1
                    ),
                });
            }
        }
    }
}
