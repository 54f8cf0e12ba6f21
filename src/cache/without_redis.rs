//! The shared tier without the `redis` feature: there is none. [`RedisTier`] and
//! [`SharedCache`] have no values, so `Tiers`'s `Option<SharedCache>` is always `None` and it
//! skips the tier with no `cfg` line of its own; the compiler removes every branch.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::entry::Cached;
use super::local::{Fingerprint, Local};
use super::revocation::TokenFingerprint;
use super::Ack;
use crate::error::ConfigError;

/// Where the shared tier would be; no value exists without the `redis` feature.
#[derive(Debug, Clone)]
pub(crate) enum RedisTier {}

/// The shared tier of one resolver; no value exists without the `redis` feature.
pub(crate) enum SharedCache {}

impl SharedCache {
    pub(crate) fn new(tier: RedisTier, _: Duration) -> Result<Self, ConfigError> {
        match tier {}
    }

    pub(crate) async fn get(&self, _: &str, _: &str) -> Option<Cached> {
        match *self {}
    }

    pub(crate) fn put(&self, _: &str, _: &str, _: &Cached) {
        match *self {}
    }

    pub(crate) fn delete(&self, _: &str, _: &str, _: u64) -> Ack {
        match *self {}
    }

    pub(crate) fn delete_user(&self, _: &str, _: i64, _: u64) -> Ack {
        match *self {}
    }

    pub(crate) fn delete_session(&self, _: &str, _: i64, _: &str, _: u64) -> Ack {
        match *self {}
    }

    pub(crate) fn token_fingerprint(&self) -> Fingerprint {
        match *self {}
    }

    pub(crate) fn delete_all(&self, _: u64) -> Ack {
        match *self {}
    }

    pub(crate) fn delete_all_folding(
        &self,
        _: std::sync::Arc<std::sync::atomic::AtomicU64>,
    ) -> Ack {
        match *self {}
    }

    pub(crate) fn counts(&self) -> (u64, u64) {
        match *self {}
    }

    pub(crate) fn fingerprint(&self, _: &str, _: &str) -> TokenFingerprint {
        match *self {}
    }

    pub(crate) fn is_subscribed(&self) -> bool {
        match *self {}
    }

    pub(crate) fn trusted_flag(&self) -> Arc<AtomicBool> {
        match *self {}
    }

    pub(crate) fn start_subscriber(&self, _: Weak<Local>) {
        match *self {}
    }
}
