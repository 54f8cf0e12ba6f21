//! Coalescing: concurrent resolutions of one key share one upstream call, and all get its result.
//!
//! A [`Flights`] map holds one entry per key whose call is under way. The first caller runs the
//! call; the rest wait on the same cell. A caller that is cancelled while waiting does not
//! cancel the others: if the one running the call goes away, the next waiter runs it. The entry
//! leaves the map when the result is known or when its last caller is gone. What is cached
//! afterwards is the resolver's business, not this module's.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::OnceCell;

use crate::cache::{CacheKey, KeyHasher, KeyRef, KeyView};
use crate::telemetry;

/// One upstream call under way, and its result once known.
type Flight<T> = Arc<OnceCell<T>>;

/// The upstream calls under way, by key.
pub(crate) struct Flights<T> {
    /// Keyed like the cache, with a seed of its own.
    map: Mutex<HashMap<CacheKey, Flight<T>, KeyHasher>>,
}

impl<T: Clone> Flights<T> {
    pub(crate) fn new() -> Self {
        Flights {
            map: Mutex::new(HashMap::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<CacheKey, Flight<T>, KeyHasher>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `call` once for every concurrent caller of `key` and gives each its result, plus
    /// `true` to the caller whose `call` ran (`false` to those who waited on it). `call` gets
    /// the key the first caller made for the map (`owned_key`'s), so that what it stores can be
    /// that key value rather than a copy made anew; a caller that takes over the call from one
    /// that went away makes its own.
    pub(crate) async fn run<Fut>(
        &self,
        key: &KeyRef<'_>,
        owned_key: impl FnOnce() -> CacheKey,
        call: impl FnOnce(CacheKey) -> Fut,
    ) -> (T, bool)
    where
        Fut: Future<Output = T>,
    {
        // The first caller's key, or (for a caller that joined) how to make one: a joined
        // caller runs `call` only if every caller before it went away, and until then it does
        // not touch the key, which a thousand callers of one token would all share.
        let (owned, flight, joined) = {
            let mut map = self.lock();
            match map.get(key as &dyn KeyView) {
                Some(flight) => (Err(owned_key), flight.clone(), true),
                None => {
                    let owned = owned_key();
                    let flight = map.entry(owned.clone()).or_default().clone();
                    (Ok(owned), flight, false)
                }
            }
        };
        let _waiting = joined.then(Waiting::start);
        let seat = Seat {
            flights: self,
            key,
            flight,
        };
        let mut ran = false;
        let result = seat
            .flight
            .get_or_init(|| {
                ran = true;
                call(owned.unwrap_or_else(|make| make()))
            })
            .await
            .clone();
        (result, ran)
    }

    /// Takes `key`'s call out of the map: later callers start a call of their own; those
    /// already waiting get its result, which the resolver checks against the revocations.
    pub(crate) fn forget(&self, key: &KeyRef<'_>) {
        self.lock().remove(key as &dyn KeyView);
    }

    /// How many keys have a call under way.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// A caller that joined another's flight, counted in `token_resolver_coalesced_waiters` until
/// it has its result or goes away.
struct Waiting;

impl Waiting {
    fn start() -> Waiting {
        metrics::gauge!(telemetry::COALESCED_WAITERS).increment(1.0);
        Waiting
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        metrics::gauge!(telemetry::COALESCED_WAITERS).decrement(1.0);
    }
}

/// One caller's place on a flight; leaving it removes the flight once it is done or empty.
struct Seat<'a, 'k, T> {
    flights: &'a Flights<T>,
    key: &'a KeyRef<'k>,
    flight: Flight<T>,
}

impl<T> Drop for Seat<'_, '_, T> {
    fn drop(&mut self) {
        let mut map = self
            .flights
            .map
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Taken out and put back when it must stay: one hash of the key in the usual case (the
        // flight is ours and done), where a look-up and then a removal hashed it twice.
        let Some((key, flight)) = map.remove_entry(self.key as &dyn KeyView) else {
            return;
        };
        let ours = Arc::ptr_eq(&flight, &self.flight);
        // The map holds one reference and each seated caller one; 2 means we are the last.
        if !(ours && (self.flight.initialized() || Arc::strong_count(&self.flight) == 2)) {
            map.insert(key, flight);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::PlainHttp;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use token_resolver_support as support;

    use super::*;
    use crate::auth_url::Endpoint;

    const EP: &str = "https://a.example/api/user";

    fn owned(token: &str) -> CacheKey {
        CacheKey::new(Arc::new(endpoint()), token)
    }

    fn endpoint() -> Endpoint {
        Endpoint::parse(EP, PlainHttp::LoopbackOnly).unwrap()
    }

    /// How many callers are seated on `token`'s flight (0 without one).
    fn seated(flights: &Flights<u32>, token: &str) -> usize {
        let key = KeyRef {
            endpoint: &endpoint(),
            token,
        };
        flights
            .lock()
            .get(&key as &dyn KeyView)
            .map_or(0, |flight| Arc::strong_count(flight) - 1)
    }

    // On tokio's paused clock, so that `eventually` costs no real time.
    #[tokio::test(start_paused = true)]
    async fn concurrent_callers_share_one_call_and_the_flight_is_removed() {
        let flights = Arc::new(Flights::<u32>::new());
        let calls = Arc::new(AtomicUsize::new(0));
        // The call ends when the test says, once every caller is seated on its flight.
        let release = Arc::new(tokio::sync::Semaphore::new(0));
        let tasks: Vec<_> = (0..50)
            .map(|_| {
                let (flights, calls, release) = (flights.clone(), calls.clone(), release.clone());
                tokio::spawn(async move {
                    let key = KeyRef {
                        endpoint: &endpoint(),
                        token: "t",
                    };
                    let (map, calls, release) = (&*flights, &calls, &release);
                    flights
                        .run(
                            &key,
                            || owned("t"),
                            |owned| async move {
                                calls.fetch_add(1, Ordering::SeqCst);
                                // The call has the very key the map holds, to store under it.
                                let held = map
                                    .lock()
                                    .get_key_value(&owned as &dyn KeyView)
                                    .is_some_and(|(in_map, _)| in_map.same(&owned));
                                let _ = release.acquire().await;
                                if held {
                                    7
                                } else {
                                    0
                                }
                            },
                        )
                        .await
                })
            })
            .collect();
        support::eventually("every caller seated on one flight", || {
            seated(&flights, "t") == 50
        })
        .await;
        release.close();
        let mut ran = 0;
        for task in tasks {
            let (value, led) = task.await.unwrap();
            assert_eq!(value, 7);
            ran += usize::from(led);
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(ran, 1);
        assert_eq!(flights.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_leader_hands_the_call_to_a_waiter() {
        let flights = Arc::new(Flights::<u32>::new());
        let f = flights.clone();
        let leader = tokio::spawn(async move {
            let key = KeyRef {
                endpoint: &endpoint(),
                token: "t",
            };
            f.run(&key, || owned("t"), |_| std::future::pending::<u32>())
                .await
        });
        support::eventually("the leader seated", || seated(&flights, "t") == 1).await;
        let f = flights.clone();
        let waiter = tokio::spawn(async move {
            let key = KeyRef {
                endpoint: &endpoint(),
                token: "t",
            };
            // The waiter that takes the call over makes a key of its own, of its token.
            f.run(
                &key,
                || owned("t"),
                |k| async move {
                    if k.token() == b"t" {
                        9
                    } else {
                        0
                    }
                },
            )
            .await
        });
        support::eventually("the waiter seated", || seated(&flights, "t") == 2).await;
        leader.abort();
        assert_eq!(waiter.await.unwrap(), (9, true));
        assert_eq!(flights.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_flight_abandoned_by_all_callers_leaves_the_map() {
        let flights = Flights::<u32>::new();
        let key = KeyRef {
            endpoint: &endpoint(),
            token: "t",
        };
        let run = flights.run(&key, || owned("t"), |_| std::future::pending::<u32>());
        assert!(tokio::time::timeout(Duration::from_millis(10), run)
            .await
            .is_err());
        assert_eq!(flights.len(), 0);
    }
}
