//! The shared Redis tier on a real three-master Redis Cluster on free loopback ports (made
//! with `redis-cli --cluster create`): two resolvers in one process act as two game-server
//! nodes; masters are killed, nodes are missing at start, and a slot is resharded mid-run.
#![cfg(feature = "redis")]

use token_resolver_support as support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{eventually, resolver_for, Scripted};
use token_resolver::{RedisTier, Resolver};
use token_resolver_support::redis::RedisCluster;

const SECRET: &str = "test-secret-of-32-bytes-length!!";

fn node(api_url: &str, urls: &[String]) -> Resolver {
    resolver_for(api_url)
        .shared_cache(RedisTier::cluster(urls, SECRET).op_timeout(Duration::from_millis(300)))
        .build()
        .unwrap()
}

/// An API whose user id is the token's length, counting calls.
async fn api() -> Scripted {
    Scripted::start(|_, seen| async move {
        let token = seen.header("authorization").unwrap_or_default().to_owned();
        support::user_answer(token.len() as i64, "p")
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_share_answers_and_every_invalidation_on_a_cluster() {
    // Pins down the cluster form: keys spread over the masters, node B answers from what A
    // stored, and invalidate, invalidate_user and invalidate_all (a scan of every master)
    // reach Redis and the other node.
    let Some(cluster) = RedisCluster::start(0) else {
        return;
    };
    let api = api().await;
    let url = api.url();
    let (a, b) = (node(&url, &cluster.urls()), node(&url, &cluster.urls()));
    let tokens: Vec<String> = (0..12).map(|i| format!("token-{i:02}")).collect();
    for t in &tokens {
        a.resolve(&url, t).await.unwrap();
    }
    eventually("A's answers reach the cluster", || {
        cluster.entry_count() == tokens.len()
    })
    .await;
    let holding = cluster
        .masters()
        .into_iter()
        .filter(|&m| cluster.nodes[m].entry_count() > 0)
        .count();
    assert!(holding >= 2, "keys spread over the masters: {holding}");
    for t in &tokens {
        b.resolve(&url, t).await.unwrap();
    }
    assert_eq!(
        api.requests(),
        tokens.len(),
        "B answered everything from Redis"
    );
    assert_eq!(b.stats().shared_hits, tokens.len() as u64);
    eventually("B listens", || b.shared_cache_subscribed()).await;

    a.invalidate(&url, &tokens[0]);
    eventually("B evicts one token", || b.stats().entries == 11).await;
    // Every token is 8 bytes: "Bearer " + 8 = user 15 has them all.
    a.invalidate_user(&url, 15);
    eventually("B evicts the user's tokens", || b.stats().entries == 0).await;
    eventually("the user's entries leave every master", || {
        cluster.entry_count() == 0
    })
    .await;

    b.resolve(&url, "other-token").await.unwrap();
    a.resolve(&url, "other-token").await.unwrap();
    eventually("the new answer is stored", || cluster.entry_count() >= 1).await;
    a.invalidate_all();
    eventually("B is empty", || b.stats().entries == 0).await;
    // The old generation's entries are still on the masters until they expire, and no node
    // reads them again.
    let calls = api.requests();
    b.resolve(&url, "other-token").await.unwrap();
    assert_eq!(api.requests(), calls + 1, "B asked the API, not Redis");
    assert_eq!((a.stats().shared_errors, b.stats().shared_errors), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_killed_mid_run_fails_no_resolution_and_sharing_resumes() {
    // Pins down a cluster failover: with a replica per master, killing a master under load
    // fails no resolution; once its replica took over, answers and invalidations are shared
    // again.
    let Some(mut cluster) = RedisCluster::start(1) else {
        return;
    };
    let api = api().await;
    let url = api.url();
    let (a, b) = (node(&url, &cluster.urls()), node(&url, &cluster.urls()));
    a.resolve(&url, "warm-up").await.unwrap();
    b.resolve(&url, "warm-up").await.unwrap();
    eventually("B listens", || b.shared_cache_subscribed()).await;

    let progress = Arc::new(AtomicUsize::new(0));
    let load = {
        let (a, url, progress) = (a.clone(), url.clone(), progress.clone());
        tokio::spawn(async move {
            let mut done = 0;
            for round in 0..60 {
                for i in 0..5 {
                    a.resolve(&url, &format!("r{round:02}-t{i}")).await.unwrap();
                    done += 1;
                    progress.store(done, Ordering::SeqCst);
                }
                // Paced, so that the load spans the master's death and the failover, which
                // the real redis-server processes take real time over.
                tokio::time::sleep(Duration::from_millis(40)).await;
            }
            done
        })
    };
    // The master goes down in the middle of the load, not before it began.
    eventually("the load is under way", || {
        progress.load(Ordering::SeqCst) >= 25
    })
    .await;
    let victim = cluster.masters()[0];
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.kill_and_wait_for_failover(victim);
        cluster
    })
    .await
    .unwrap();
    assert_eq!(load.await.unwrap(), 300, "every resolution succeeded");

    // After the failover: A's fresh answers reach B through Redis, and A's invalidation too.
    eventually("B listens", || b.shared_cache_subscribed()).await;
    // A's tier may rest after the failover's errors: each round resolves new tokens, until
    // a round's answers all reach the cluster.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut round = 0;
    let tokens = loop {
        let tokens: Vec<String> = (0..6).map(|i| format!("after-{round}-{i}")).collect();
        round += 1;
        let base = cluster.entry_count();
        for t in &tokens {
            a.resolve(&url, t).await.unwrap();
        }
        // The writes run in the background, each within the op timeout: a second is enough
        // for all of them to land, unless the tier rested and skipped them.
        let landed = eventually("the round's answers reach the cluster", || {
            cluster.entry_count() >= base + tokens.len()
        });
        if tokio::time::timeout(Duration::from_secs(1), landed)
            .await
            .is_ok()
        {
            break tokens;
        }
        assert!(
            Instant::now() < deadline,
            "A never wrote to the cluster again: {:?} {} {base}",
            a.stats(),
            cluster.entry_count()
        );
    };
    let calls = api.requests();
    for t in &tokens {
        b.resolve(&url, t).await.unwrap();
    }
    assert_eq!(api.requests(), calls, "B answered from the cluster");
    let before = b.stats().entries;
    a.invalidate(&url, &tokens[0]);
    eventually("A's invalidation reaches B", || {
        b.stats().entries == before - 1
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_the_node_list_down_at_start_costs_nothing() {
    // Pins down a node list where half the nodes are down at start: the live ones carry the
    // tier, answers and invalidations are shared, and no resolution fails.
    let Some(cluster) = RedisCluster::start(0) else {
        return;
    };
    let dead: Vec<String> = (0..3)
        .map(|_| {
            format!(
                "redis://127.0.0.1:{}",
                token_resolver_support::redis::free_port()
            )
        })
        .collect();
    let live = cluster.urls();
    let urls: Vec<String> = dead
        .iter()
        .zip(&live)
        .flat_map(|(d, l)| [d.clone(), l.clone()])
        .collect();
    let api = api().await;
    let url = api.url();
    let (a, b) = (node(&url, &urls), node(&url, &urls));
    for i in 0..6 {
        a.resolve(&url, &format!("t{i}")).await.unwrap();
    }
    eventually("A's answers reach the cluster", || {
        cluster.entry_count() == 6
    })
    .await;
    for i in 0..6 {
        b.resolve(&url, &format!("t{i}")).await.unwrap();
    }
    assert_eq!(api.requests(), 6, "B answered from Redis");
    eventually("B listens", || b.shared_cache_subscribed()).await;
    a.invalidate(&url, "t0");
    eventually("B evicts the token", || b.stats().entries == 5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_resharded_mid_run_is_followed_through_ask_and_moved() {
    // Pins down MOVED/ASK: a token's slot migrates to another master; while it is migrating
    // (ASK) and once it moved (MOVED), nodes that learned the old layout still answer from
    // Redis, with no API call and no error.
    let Some(cluster) = RedisCluster::start(0) else {
        return;
    };
    let api = api().await;
    let url = api.url();
    let urls = cluster.urls();
    let (a, b, c) = (node(&url, &urls), node(&url, &urls), node(&url, &urls));
    a.resolve(&url, "migrating").await.unwrap();
    eventually("A's answer reaches the cluster", || {
        cluster.entry_count() == 1
    })
    .await;
    // B and C learn the slot layout before the move.
    b.resolve(&url, "warm-b").await.unwrap();
    c.resolve(&url, "warm-c").await.unwrap();
    let key = cluster.keys("*:tok:*").remove(0);
    let from = cluster.owner_of(&key);
    let to = *cluster.masters().iter().find(|&&m| m != from).unwrap();

    let slot = cluster.begin_migration(&key, to);
    let calls = api.requests();
    b.resolve(&url, "migrating").await.unwrap();
    assert_eq!(
        api.requests(),
        calls,
        "B followed ASK to the importing master: {:?}",
        b.stats()
    );

    cluster.end_migration(slot, to);
    assert_eq!(cluster.owner_of(&key), to);
    c.resolve(&url, "migrating").await.unwrap();
    assert_eq!(api.requests(), calls, "C followed MOVED to the new owner");
    assert_eq!(
        (b.stats().shared_errors, c.stats().shared_errors),
        (0, 0),
        "no redirect cost an error"
    );
}
