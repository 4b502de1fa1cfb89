// shardlog patch: the tasks of one executor, so that dropping the executor can cancel and
// free every task still on it (vendor/glommio/PATCHED.md, "Teardown").
//
// Upstream glommio 0.9.0 keeps no list of an executor's tasks: a parked task is reachable
// only through its wakers, so a task parked on something that it (or another parked task)
// owns, or on a future that never wakes (`std::future::pending()`), was never freed.

use std::cell::RefCell;

use ahash::AHashSet;

/// Every task of one executor that is allocated and not yet destroyed, by address.
///
/// Touched only on the executor's own thread: at a task's allocation and destruction, and
/// by the executor's teardown.
#[derive(Debug, Default)]
pub(crate) struct TaskRegistry {
    tasks: RefCell<AHashSet<usize>>,
}

impl TaskRegistry {
    pub(crate) fn insert(&self, ptr: *const ()) {
        let fresh = self.tasks.borrow_mut().insert(ptr as usize);
        assert!(fresh, "a task registered twice");
    }

    pub(crate) fn remove(&self, ptr: *const ()) {
        let known = self.tasks.borrow_mut().remove(&(ptr as usize));
        assert!(known, "a task destroyed that was never registered");
    }

    pub(crate) fn contains(&self, ptr: *const ()) -> bool {
        self.tasks.borrow().contains(&(ptr as usize))
    }

    /// The tasks registered now (tasks may come and go while the caller walks them).
    pub(crate) fn snapshot(&self) -> Vec<*const ()> {
        self.tasks.borrow().iter().map(|&p| p as *const ()).collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.tasks.borrow().len()
    }
}
