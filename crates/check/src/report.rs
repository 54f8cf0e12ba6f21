//! The outcome of a check run: one [`CheckResult`] per [`CheckId`], each with a [`Verdict`], a
//! detail and a hint, gathered in a [`Report`] whose `Display` is the table the CLI prints.

use std::fmt;

/// One check; [`as_str`](Self::as_str) is the name the report prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CheckId {
    /// The URL's scheme: tokens must not travel in the clear.
    Https,
    /// The token's syntax, as the resolver checks it before any call.
    TokenSyntax,
    /// `POST` with the token is answered 200.
    PostAccepted,
    /// The answer is `{"id": <integer>, "name": <string>}`.
    AnswerShape,
    /// The answer's `Content-Type` is JSON.
    ContentType,
    /// The answer's `Cache-Control` is present and sane.
    CacheControl,
    /// A wrong or missing token gets 401/403.
    BearerRead,
    /// The 401 carries a Bearer challenge.
    WwwAuthenticate,
    /// Latency percentiles over several calls.
    Latency,
    /// Login, access token, then `/api/user` for that token.
    LoginFlow,
}

impl CheckId {
    /// The check's name, e.g. `"bearer_read"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            CheckId::Https => "https",
            CheckId::TokenSyntax => "token_syntax",
            CheckId::PostAccepted => "post_accepted",
            CheckId::AnswerShape => "answer_shape",
            CheckId::ContentType => "content_type",
            CheckId::CacheControl => "cache_control",
            CheckId::BearerRead => "bearer_read",
            CheckId::WwwAuthenticate => "www_authenticate",
            CheckId::Latency => "latency",
            CheckId::LoginFlow => "login_flow",
        }
    }
}

impl fmt::Display for CheckId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a check went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Conforms.
    Pass,
    /// Works, but should be fixed before going live; does not fail the check run.
    Warn,
    /// Breaks the protocol or security; the check run fails.
    Fail,
    /// Not run: it needs something that is missing (an earlier check's answer, credentials).
    Skip,
}

impl Verdict {
    /// `"PASS"`, `"WARN"`, `"FAIL"` or `"SKIP"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Warn => "WARN",
            Verdict::Fail => "FAIL",
            Verdict::Skip => "SKIP",
        }
    }
}

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckResult {
    /// Which check.
    pub check: CheckId,
    /// How it went.
    pub verdict: Verdict,
    /// What was seen, e.g. `a made-up token got HTTP 200`. Never the token.
    pub detail: String,
    /// What to change, for failures and warnings.
    pub hint: Option<String>,
}

impl CheckResult {
    pub(super) fn new(check: CheckId, verdict: Verdict, detail: impl Into<String>) -> Self {
        CheckResult {
            check,
            verdict,
            detail: detail.into(),
            hint: None,
        }
    }

    pub(super) fn pass(check: CheckId, detail: impl Into<String>) -> Self {
        Self::new(check, Verdict::Pass, detail)
    }

    pub(super) fn skip(check: CheckId, detail: impl Into<String>) -> Self {
        Self::new(check, Verdict::Skip, detail)
    }

    pub(super) fn fail(check: CheckId, detail: impl Into<String>, hint: impl Into<String>) -> Self {
        Self::new(check, Verdict::Fail, detail).with_hint(hint)
    }

    pub(super) fn warn(check: CheckId, detail: impl Into<String>, hint: impl Into<String>) -> Self {
        Self::new(check, Verdict::Warn, detail).with_hint(hint)
    }

    fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

/// Every check's result, in the order printed. `Display` renders the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The `/api/user` URL checked.
    pub endpoint: String,
    /// One result per check.
    pub results: Vec<CheckResult>,
}

impl Report {
    /// `true` when no check failed (warnings and skips do not fail).
    pub fn passed(&self) -> bool {
        self.count(Verdict::Fail) == 0
    }

    /// The result of `check`, if it is in the report.
    pub fn get(&self, check: CheckId) -> Option<&CheckResult> {
        self.results.iter().find(|r| r.check == check)
    }

    /// Skips each of `checks`, saying why.
    pub(super) fn skip(&mut self, checks: &[CheckId], why: &str) {
        for &id in checks {
            self.results.push(CheckResult::skip(id, why));
        }
    }

    /// How many checks ended with `verdict`.
    pub fn count(&self, verdict: Verdict) -> usize {
        self.results.iter().filter(|r| r.verdict == verdict).count()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "token-resolver check of {}\n", self.endpoint)?;
        let width = self
            .results
            .iter()
            .map(|r| r.check.as_str().len())
            .max()
            .unwrap_or(0);
        for r in &self.results {
            writeln!(
                f,
                "  {}  {:<width$}  {}",
                r.verdict.as_str(),
                r.check.as_str(),
                r.detail
            )?;
            if let Some(hint) = &r.hint {
                writeln!(f, "  {:4}  {:<width$}  hint: {hint}", "", "")?;
            }
        }
        let verdict = if self.passed() { "ready" } else { "NOT READY" };
        write!(
            f,
            "\nverdict: {verdict} ({} passed, {} failed, {}, {} skipped)",
            self.count(Verdict::Pass),
            self.count(Verdict::Fail),
            plural(self.count(Verdict::Warn), "warning"),
            self.count(Verdict::Skip)
        )
    }
}

/// `1 warning`, `2 warnings`.
pub(super) fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("{n} {noun}")
    } else {
        format!("{n} {noun}s")
    }
}
