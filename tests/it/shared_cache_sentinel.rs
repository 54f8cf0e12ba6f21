//! The shared Redis tier behind Sentinel, against a real group on free loopback ports (one
//! master, one replica, three sentinels): two resolvers in one process act as two game-server
//! nodes, and the test kills the master mid-run.
#![cfg(feature = "redis")]

use token_resolver_support as support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{eventually, resolver_for, Scripted};
use token_resolver::{RedisTier, RedisTierError, Resolver};
use token_resolver_support::redis::{SentinelGroup, MASTER};

const SECRET: &str = "test-secret-of-32-bytes-length!!";

fn node(api_url: &str, group: &SentinelGroup) -> Resolver {
    resolver_for(api_url)
        .shared_cache(
            RedisTier::sentinel(group.sentinel_urls(), MASTER, SECRET)
                .op_timeout(Duration::from_millis(200)),
        )
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_fails_no_resolution_and_invalidations_follow_the_new_master() {
    // Pins down Sentinel: answers are shared through the master; killing it mid-run fails no
    // resolution; afterwards both nodes use the promoted replica, answers are shared again and
    // an invalidation issued after the failover reaches the other node.
    let Some(group) = SentinelGroup::start() else {
        return;
    };
    let api = Scripted::start(|_, seen| async move {
        let token = seen.header("authorization").unwrap_or_default().to_owned();
        let id = token.len() as i64;
        support::user_answer(id, "p")
    })
    .await;
    let url = api.url();
    let (a, b) = (node(&url, &group), node(&url, &group));
    a.resolve(&url, "before").await.unwrap();
    eventually("A's answer reaches the master", || {
        group.master.entry_count() >= 1
    })
    .await;
    b.resolve(&url, "before").await.unwrap();
    assert_eq!(api.requests(), 1, "B answered from Redis");
    eventually("B listens", || b.shared_cache_subscribed()).await;

    let group = fail_over_under_load(group, &a, &url).await;
    // B's reader follows the new master, which holds the revocation stream as the old one
    // did: B catches up on what it missed (nothing) and keeps what it had.
    eventually("B reads the stream on the new master", || {
        b.shared_cache_subscribed()
    })
    .await;
    assert_eq!(b.stats().entries, 1, "nothing was revoked: B keeps it");
    let calls = api.requests();
    let after = a_writes_to_the_new_master(&group, &a, &url).await;
    let before_b = api.requests();
    b.resolve(&url, &after).await.unwrap();
    assert_eq!(api.requests(), before_b, "B answered from the new master");
    assert!(api.requests() > calls);
    assert_eq!(b.stats().entries, 2);

    a.invalidate(&url, &after);
    eventually("A's invalidation reaches B through the new master", || {
        b.stats().entries == 1
    })
    .await;
}

/// Kills the master in the middle of a load of 300 resolutions on `a`, waits for a replica to
/// be promoted, and checks that every resolution succeeded; the group after the failover.
async fn fail_over_under_load(mut group: SentinelGroup, a: &Resolver, url: &str) -> SentinelGroup {
    let progress = Arc::new(AtomicUsize::new(0));
    let load = {
        let (a, url, progress) = (a.clone(), url.to_owned(), progress.clone());
        tokio::spawn(async move {
            let mut done = 0;
            for round in 0..60 {
                for i in 0..5 {
                    a.resolve(&url, &format!("r{round}-t{i}")).await.unwrap();
                    done += 1;
                    progress.store(done, Ordering::SeqCst);
                }
                // Paced, so that the load spans the master's death and the failover, which
                // the real redis-server and sentinel processes take real time over.
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            done
        })
    };
    // The master goes down in the middle of the load, not before it began.
    eventually("the load is under way", || {
        progress.load(Ordering::SeqCst) >= 25
    })
    .await;
    let group = tokio::task::spawn_blocking(move || {
        group.kill_master_and_wait_for_failover();
        group
    })
    .await
    .unwrap();
    assert_eq!(load.await.unwrap(), 300, "every resolution succeeded");

    group
}

/// Resolves new tokens on `a` until one's answer reaches the promoted replica (A's tier may be
/// resting after the failover's errors); that token.
async fn a_writes_to_the_new_master(group: &SentinelGroup, a: &Resolver, url: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    for attempt in 0.. {
        assert!(Instant::now() < deadline, "A never wrote to the new master");
        let (token, entries) = (format!("after-{attempt}"), group.replica.entry_count());
        a.resolve(url, &token).await.unwrap();
        // The write runs in the background within the op timeout: a second is enough for it
        // to land, unless the tier rested and skipped it.
        let landed = eventually("the answer reaches the new master", || {
            group.replica.entry_count() > entries
        });
        if tokio::time::timeout(Duration::from_secs(1), landed)
            .await
            .is_ok()
        {
            return token;
        }
    }
    unreachable!("the loop returns or fails")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_name_no_sentinel_knows_is_reported_and_costs_no_resolution() {
    // Pins down a wrong --redis-master: check names it, and resolutions go on through the API.
    let Some(group) = SentinelGroup::start() else {
        return;
    };
    let tier = RedisTier::sentinel(group.sentinel_urls(), "no-such-master", SECRET);
    let err = tier.check(Duration::from_secs(3)).await.unwrap_err();
    assert!(
        matches!(&err, RedisTierError::UnknownMaster { name } if name == "no-such-master"),
        "{err:?}"
    );
    assert!(err.is_config());

    let api = Scripted::start(|n, _| async move { support::user_answer(n as i64, "p") }).await;
    let resolver = resolver_for(&api.url())
        .shared_cache(tier.op_timeout(Duration::from_millis(200)))
        .build()
        .unwrap();
    for i in 0..5 {
        resolver
            .resolve(&api.url(), &format!("t{i}"))
            .await
            .unwrap();
    }
    assert!(resolver.stats().shared_errors >= 1);
    assert_eq!(group.master.entry_count(), 0);
}
