//! The test servers in `tests/support/` keep their promises: a handler or behaviour that
//! panics fails the test that started the server, instead of showing up as a reset the test
//! might take for the fault it injects.

use token_resolver_support as support;

use support::{user_answer, RawServer, Scripted};

#[tokio::test]
#[should_panic(expected = "a handler of the scripted server panicked")]
async fn a_scripted_handler_that_panics_fails_the_test() {
    let server = Scripted::start(|n, _| async move {
        assert!(n > 0, "the first request breaks the handler");
        user_answer(1, "never")
    })
    .await;
    let status = reqwest::Client::new()
        .post(format!("{}/api/user", server.url()))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 500, "the panic is answered, not a reset");
    drop(server);
}

#[tokio::test]
#[should_panic(expected = "a behaviour of the raw server panicked")]
async fn a_raw_behaviour_that_panics_fails_the_test() {
    let server = RawServer::start(|_, _, _stream| async move {
        panic!("the behaviour breaks");
    })
    .await;
    let _ = reqwest::Client::new()
        .post(format!("{}/api/user", server.url()))
        .send()
        .await;
    support::eventually("the behaviour ran", || server.panics() == 1).await;
    drop(server);
}
