//! The sidecar's event stream across a restart and without a reader, over real HTTP on
//! loopback in front of the reference API: a stream that cannot prove it missed nothing is told
//! to `resync`; the sessions of a game server that no longer reads are reclaimed; a session
//! whose token has no `exp` is still checked again; and one whose revocation the sidecar's
//! follower missed is checked again too.

use token_resolver_support as support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::common;

use common::Parties;
use serde_json::json;
use support::{respond, user_answer, Scripted};
use token_resolver::Resolver;
use token_resolver_sidecar::{Sidecar, SidecarConfig};

/// The number after the epoch in an event id.
fn n(id: &str) -> u64 {
    id.rsplit_once('-').unwrap().1.parse().unwrap()
}

/// The epoch an event id begins with.
fn epoch(id: &str) -> &str {
    id.split_once('-').unwrap().0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_started_again_on_the_same_port_tells_a_stream_from_before_to_resync() {
    let parties = Parties::start(
        SidecarConfig::default(),
        token_resolver_reference_api::demo_users(),
    )
    .await;
    let mut events = parties.events(None).await;
    let bob = parties.token("bob").await;
    parties
        .resolve(json!({"access_token": bob, "session": "b"}))
        .await;
    parties.ban(2).await;
    let before = events.next().await;
    assert_eq!(before.data["session"], "b");
    drop(events);

    let parties = parties.restart(SidecarConfig::default(), async {}).await;
    // The new process's own events: one a stream took, one it missed.
    let mut current = parties.events(None).await;
    for (user, session) in [("alice", "a"), ("carol", "c")] {
        let token = parties.token(user).await;
        let (status, _) = parties
            .resolve(json!({"access_token": token, "session": session}))
            .await;
        assert_eq!(status, 200);
    }
    parties.ban(1).await;
    let taken = current.next().await;
    assert_eq!(taken.data["session"], "a");
    assert_ne!(epoch(&taken.id), epoch(&before.id), "another process");
    drop(current);
    parties.ban(3).await;
    support::eventually("carol's session ended", || {
        parties.sidecar.sidecar().sessions() == 0
    })
    .await;

    // From the previous process: resync first, then all the journal holds.
    let mut stale = parties.events(Some(&before.id)).await;
    let first = stale.next().await;
    assert_eq!(
        (first.event.as_str(), &first.data),
        ("resync", &json!({"type": "resync"}))
    );
    assert_eq!(stale.next().await.data["session"], "a");
    assert_eq!(stale.next().await.data["session"], "c");

    // Ahead of the journal, or unreadable: resync first.
    let ahead = format!("{}-{}", epoch(&taken.id), n(&taken.id) + 100);
    for id in [ahead.as_str(), "42", "not an id"] {
        let mut odd = parties.events(Some(id)).await;
        assert_eq!(odd.next().await.event, "resync", "{id}");
    }

    // A current id: what it missed, and no resync.
    let mut back = parties.events(Some(&taken.id)).await;
    let missed = back.next().await;
    assert_eq!(
        (missed.event.as_str(), &missed.data["session"]),
        ("revoked", &json!("c"))
    );
    assert!(n(&missed.id) > n(&taken.id));
    assert!(back.within(Duration::from_millis(200)).await.is_none());
}

// Paused: everything is in-process on loopback, and the reclaimer waits on tokio's clock.
#[tokio::test(start_paused = true)]
async fn the_sessions_of_a_game_server_that_no_longer_reads_are_reclaimed() {
    let config = SidecarConfig {
        reclaim_after: Some(Duration::from_millis(400)),
        ..SidecarConfig::default()
    };
    let parties = Parties::start(config, token_resolver_reference_api::demo_users()).await;
    let mut events = parties.events(None).await;
    for (user, session) in [("alice", "a"), ("bob", "b")] {
        let token = parties.token(user).await;
        parties
            .resolve(json!({"access_token": token, "session": session}))
            .await;
    }
    parties.ban(2).await;
    let last = events.next().await;
    assert_eq!(last.data["session"], "b");
    // Read: kept, however long. On the paused clock (no real time): a sleep rather than
    // advance(), so that the reclaimer's every timer due meanwhile has run before the check.
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(parties.sidecar.sidecar().sessions(), 1, "a reader holds it");

    // The game server is gone: no reader, no DELETE.
    drop(events);
    let gone = tokio::time::Instant::now();
    support::eventually("alice's session is reclaimed", || {
        parties.sidecar.sidecar().sessions() == 0
    })
    .await;
    assert!(
        gone.elapsed() >= Duration::from_millis(350),
        "not before the bound"
    );
    // One that comes back with an id from before cannot trust what it holds.
    let mut back = parties.events(Some(&last.id)).await;
    let told = back.next().await;
    assert_eq!(
        (told.event.as_str(), &told.data),
        ("resync", &json!({"type": "resync"}))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_token_has_no_exp_is_checked_again_and_ends_when_it_falls() {
    let banned = Arc::new(AtomicBool::new(false));
    // No `exp`: nothing ends the session but a check.
    let upstream = banning_upstream(banned.clone()).await;
    let resolver = Resolver::builder()
        .default_auth_url(upstream.url())
        .cache_ttl(Duration::ZERO)
        .build()
        .unwrap();
    let config = SidecarConfig {
        max_unchecked: Duration::from_millis(300),
        ..SidecarConfig::default()
    };
    let sidecar = Sidecar::new(resolver, config)
        .spawn("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let base = format!("http://{}", sidecar.local_addr());
    let mut events =
        support::SseReader::new(http.get(format!("{base}/v1/events")).send().await.unwrap());
    let answer = http
        .post(format!("{base}/v1/resolve"))
        .json(&json!({"access_token": "never-expires", "session": "g"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let answer: serde_json::Value = answer.json().await.unwrap();
    assert_eq!(answer["expires_at"], json!(null));
    // Checked again, and still standing: no event.
    support::eventually("a second check", || upstream.requests() >= 2).await;
    banned.store(true, Ordering::SeqCst);
    let revoked = tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .expect("revoked within the bound")
        .expect("the stream is open");
    assert_eq!(
        (revoked.event.as_str(), &revoked.data),
        (
            "revoked",
            &json!({"type": "revoked", "session": "g", "user_id": 7, "reason": "revoked"})
        )
    );
    assert_eq!(sidecar.sidecar().sessions(), 0);
}

/// An upstream answering user 7 (no `exp`) until `banned`, then 401.
async fn banning_upstream(banned: Arc<AtomicBool>) -> Scripted {
    Scripted::start(move |_, _| {
        let banned = banned.load(Ordering::SeqCst);
        async move {
            if banned {
                respond(401, &[("www-authenticate", "Bearer")], b"")
            } else {
                user_answer(7, "grace")
            }
        }
    })
    .await
}

#[tokio::test]
async fn a_follower_of_the_revocations_that_falls_behind_checks_every_session_again() {
    let banned = Arc::new(AtomicBool::new(false));
    let upstream = banning_upstream(banned.clone()).await;
    let resolver = Resolver::builder()
        .default_auth_url(upstream.url())
        .cache_ttl(Duration::ZERO)
        .build()
        .unwrap();
    let sidecar = Sidecar::new(resolver.clone(), SidecarConfig::default())
        .spawn("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let base = format!("http://{}", sidecar.local_addr());
    let mut events =
        support::SseReader::new(http.get(format!("{base}/v1/events")).send().await.unwrap());
    let answer = http
        .post(format!("{base}/v1/resolve"))
        .json(&json!({"access_token": "t", "session": "g"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    // User 7 is banned, and the revocation that says so is among more than the follower's
    // channel holds, sent while it cannot run (this runtime has one thread): it hears that it
    // missed some, not which.
    banned.store(true, Ordering::SeqCst);
    for user_id in 1_000..3_000 {
        resolver.invalidate_user(&upstream.url(), user_id);
    }
    let revoked = tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .expect("revoked within the bound")
        .expect("the stream is open");
    assert_eq!(
        (revoked.event.as_str(), &revoked.data["session"]),
        ("revoked", &json!("g"))
    );
}

#[tokio::test]
async fn a_stream_holds_an_id_of_this_process_before_any_event() {
    use futures_util::StreamExt;

    let api = support::reference_api().await;
    let resolver = Resolver::builder()
        .default_auth_url(api.base_url())
        .build()
        .unwrap();
    let sidecar = Sidecar::new(resolver, SidecarConfig::default())
        .spawn("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let response = reqwest::get(format!("http://{}/v1/events", sidecar.local_addr()))
        .await
        .unwrap();
    let mut body = response.bytes_stream();
    let first = tokio::time::timeout(Duration::from_secs(5), body.next())
        .await
        .expect("at once")
        .expect("a chunk")
        .unwrap();
    let first = String::from_utf8(first.to_vec()).unwrap();
    // `id:` alone: an EventSource keeps it, and no client acts on an event without data.
    let id = first
        .strip_prefix("id: ")
        .and_then(|rest| rest.strip_suffix("\n\n"))
        .unwrap_or_else(|| panic!("{first:?}"));
    assert_eq!(n(id), 0);
    assert_eq!(epoch(id).len(), 16, "{id}");
}
