//! The namespaces and Service names the loop's stores hold, each held once: a namespace is
//! named by every object in it, and a Service's name by its view, its key, its Revisions'
//! owner label, the revision index, its status record and its drift entry. Each decoded object
//! trades its own copies for the shared ones ([`super::store::Cached::share`]) before the store
//! keeps it, so one string serves them all.
//!
//! A name nobody else holds any more is dropped when the set has doubled since it was last
//! swept, and after every complete list: the set stays within twice what the stores name.
//! Never calls the API.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use crate::locks::lock;

/// Fewer names than this are never swept: a small set costs nothing worth a walk.
const SWEEP_FLOOR: usize = 1024;

#[derive(Default)]
struct Set {
    names: HashSet<Arc<str>>,
    /// Its size after the last sweep.
    swept: usize,
}

/// The shared names; cheap to clone (one set for every store of the loop).
#[derive(Clone, Default)]
pub struct Names(Arc<Mutex<Set>>);

impl Names {
    /// The shared copy of `name`, which replaces it.
    pub fn share(&self, name: &mut Arc<str>) {
        let mut set = lock(&self.0);
        if let Some(held) = set.names.get(&**name) {
            *name = held.clone();
            return;
        }
        set.names.insert(name.clone());
        if set.names.len() > SWEEP_FLOOR.max(2 * set.swept) {
            sweep(&mut set);
        }
    }

    /// Drop the names nobody else holds (a complete list is done).
    pub fn sweep(&self) {
        sweep(&mut lock(&self.0));
    }

    /// The number of names held.
    pub fn len(&self) -> usize {
        lock(&self.0).names.len()
    }

    /// No name held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn sweep(set: &mut Set) {
    set.names.retain(|name| Arc::strong_count(name) > 1);
    set.swept = set.names.len();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_names_become_one_and_unheld_ones_are_swept() {
        let names = Names::default();
        let (mut a, mut b) = (Arc::<str>::from("team"), Arc::<str>::from("team"));
        names.share(&mut a);
        names.share(&mut b);
        assert!(Arc::ptr_eq(&a, &b));
        let mut gone = Arc::<str>::from("gone");
        names.share(&mut gone);
        assert_eq!(names.len(), 2);
        drop(gone);
        names.sweep();
        assert_eq!(names.len(), 1, "only what someone holds stays");

        // Past the floor and twice the last sweep, adding sweeps by itself.
        for i in 0..=SWEEP_FLOOR {
            let mut once = Arc::<str>::from(format!("app-{i}"));
            names.share(&mut once);
        }
        assert!(names.len() < SWEEP_FLOOR, "{}", names.len());
        assert!(Arc::ptr_eq(&a, &b));
    }
}
