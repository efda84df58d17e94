//! Locks that stay usable after a panic: the one place std's lock poisoning is set aside.
//!
//! Every lock of the server and the loop guards plain data (counters, maps, a last call) that a
//! panic elsewhere cannot leave half-written in a way that matters more than stopping would, so
//! a poisoned lock is taken as it is instead of spreading the panic to every later request.
//! std's locks and these functions rather than parking_lot's: the lock types, their guards
//! and the `Condvar` of `telemetry::logs` stay std's, so each site changes in one line, and the
//! crate takes no lock library for what a function does. Never holds a guard itself; a caller
//! drops its guard before any `.await`.

use std::sync::{
    Condvar, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard,
};
use std::time::Duration;

/// Lock `mutex`, poisoned or not.
pub fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Read `lock`, poisoned or not.
pub fn read<T: ?Sized>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

/// Write `lock`, poisoned or not.
pub fn write<T: ?Sized>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

/// Wait on `condvar` with `guard` for at most `timeout` while `waiting` holds, poisoned or not;
/// the guard comes back either way.
pub fn wait_while<'a, T>(
    condvar: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: Duration,
    waiting: impl FnMut(&mut T) -> bool,
) -> MutexGuard<'a, T> {
    let waited = condvar.wait_timeout_while(guard, timeout, waiting);
    waited.unwrap_or_else(PoisonError::into_inner).0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poison(f: impl FnOnce() + Send) {
        std::thread::scope(|s| {
            assert!(s.spawn(f).join().is_err(), "the closure panics");
        });
    }

    #[test]
    fn a_poisoned_mutex_is_still_locked_with_its_data() {
        let mutex = Mutex::new(1);
        poison(|| {
            let mut guard = mutex.lock().unwrap();
            *guard = 2;
            panic!("while holding the lock");
        });
        assert!(mutex.is_poisoned());
        assert_eq!(*lock(&mutex), 2);
    }

    #[test]
    fn a_poisoned_rwlock_is_still_read_and_written() {
        let rw = RwLock::new(1);
        poison(|| {
            let _guard = rw.write().unwrap();
            panic!("while holding the lock");
        });
        assert!(rw.is_poisoned());
        *write(&rw) += 1;
        assert_eq!(*read(&rw), 2);
    }
}
