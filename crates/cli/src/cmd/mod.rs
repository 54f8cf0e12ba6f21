//! One module per subcommand, each with its arguments and what it does.

pub(crate) mod check;
pub(crate) mod demo;
pub(crate) mod game_server;
pub(crate) mod load;
pub(crate) mod redis;
pub(crate) mod resolve;
pub(crate) mod run;
pub(crate) mod serve_api;
pub(crate) mod serving;
pub(crate) mod sidecar;
