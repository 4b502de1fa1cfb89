//! Slowing down repeated authentication failures from one address (per shard, no lock).
//!
//! Each failure is answered after a delay: `FIRST_DELAY` for the first (Kafka's
//! `connection.failed.authentication.delay.ms` is 100 ms too), doubling with each further
//! failure from the same IP address up to `MAX_DELAY`; an address with no failure for
//! `FORGET_AFTER` starts again. Bounded: at most `MAX_ADDRESSES` addresses are
//! remembered per shard (the one whose last failure is oldest is forgotten first). A plain
//! state machine over `Instant`s given by the caller, so it is tested without sleeping.

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

pub const FIRST_DELAY: Duration = Duration::from_millis(100);
pub const MAX_DELAY: Duration = Duration::from_secs(5);
pub const FORGET_AFTER: Duration = Duration::from_secs(60);
pub const MAX_ADDRESSES: usize = 4096;

/// Failures per address on one shard.
#[derive(Default)]
pub struct FailureThrottle {
    addresses: RefCell<HashMap<IpAddr, (u32, Instant)>>,
}

impl FailureThrottle {
    /// Records a failure from `ip` at `now`; how long to wait before answering it.
    pub fn failure_delay(&self, ip: IpAddr, now: Instant) -> Duration {
        let mut addresses = self.addresses.borrow_mut();
        if addresses.len() >= MAX_ADDRESSES && !addresses.contains_key(&ip) {
            addresses.retain(|_, (_, last)| now.saturating_duration_since(*last) < FORGET_AFTER);
            if addresses.len() >= MAX_ADDRESSES {
                let oldest = addresses.iter().min_by_key(|(_, (_, last))| *last).map(|(ip, _)| *ip);
                addresses.remove(&oldest.expect("the map is full"));
            }
        }
        let (count, last) = addresses.entry(ip).or_insert((0, now));
        if now.saturating_duration_since(*last) >= FORGET_AFTER {
            *count = 0;
        }
        *count = count.saturating_add(1);
        *last = now;
        let doublings = (*count - 1).min(16);
        FIRST_DELAY.saturating_mul(1 << doublings).min(MAX_DELAY)
    }

    /// Addresses remembered (for tests).
    pub fn remembered(&self) -> usize {
        self.addresses.borrow().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_per_failure_up_to_the_bound_and_are_forgotten() {
        let throttle = FailureThrottle::default();
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let other: IpAddr = "10.0.0.2".parse().unwrap();
        let t0 = Instant::now();
        let delays: Vec<u64> =
            (0..8).map(|_| throttle.failure_delay(ip, t0).as_millis() as u64).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        assert_eq!(throttle.failure_delay(other, t0), FIRST_DELAY, "per address");
        let later = t0 + FORGET_AFTER;
        assert_eq!(throttle.failure_delay(ip, later), FIRST_DELAY, "forgotten after a while");
    }

    #[test]
    fn the_number_of_addresses_remembered_is_bounded() {
        let throttle = FailureThrottle::default();
        let t0 = Instant::now();
        for i in 0..(MAX_ADDRESSES as u32 + 100) {
            let ip = IpAddr::from(i.to_be_bytes());
            throttle.failure_delay(ip, t0 + Duration::from_millis(i as u64));
        }
        assert_eq!(throttle.remembered(), MAX_ADDRESSES);
    }
}
