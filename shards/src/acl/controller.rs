//! ACL changes through the controller, and each shard's decision on its own copy.
//!
//! CreateAcls and DeleteAcls reach shard 0 (over the mesh from other shards), which turns
//! them into one change record of the metadata log (`TopicChange::CreateAcls` /
//! `DeleteAcls`) under the controller lock: written and fdatasync'd, applied by every
//! shard to its table copy, and only then answered, exactly like a topic change. So an
//! answered ACL change survives a crash and is in force on every shard.
//!
//! Invariant: a record adds only bindings that are not in the table and removes only
//! bindings that are (the controller computes both from the table under its lock), so
//! replaying it can check both and refuse a log that does not follow (never guess).

use std::net::IpAddr;
use std::rc::Rc;

use super::{AclBinding, AclFilter, AclOperation, Requester, ResourceType, ANONYMOUS};
use crate::controller::CONTROLLER_SHARD;
use crate::error::TopicError;
use crate::message::{ShardReply, ShardRequest};
use crate::metadata::{TopicMeta, TopicTable};
use crate::metadata_log::{ChangeRecord, TopicChange};
use crate::shard::Shard;

impl Shard {
    /// Whether `principal` (`None`: ANONYMOUS) connected from `host` may do `operation` on
    /// the resource, by this shard's copy of the ACLs. Callers check
    /// `config.authorizer.enabled` first; this always decides.
    pub fn authorize(
        &self,
        principal: Option<&str>,
        host: Option<IpAddr>,
        operation: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        let who = Requester { principal: principal.unwrap_or(ANONYMOUS), host };
        let table = self.table_ref();
        self.config.authorizer.allows(&table.acls, who, operation, resource_type, name)
    }

    /// Whether `principal` may do `operation` on some resource of the type (InitProducerId
    /// without a transactional id: WRITE on any topic).
    pub fn authorize_any(
        &self,
        principal: Option<&str>,
        host: Option<IpAddr>,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool {
        let who = Requester { principal: principal.unwrap_or(ANONYMOUS), host };
        let table = self.table_ref();
        self.config.authorizer.allows_any(&table.acls, who, operation, resource_type)
    }

    /// Every ACL binding a filter matches, from this shard's copy (DescribeAcls).
    pub fn describe_acls(&self, filter: &AclFilter) -> Vec<AclBinding> {
        self.table_ref().acls.matching(filter).cloned().collect()
    }

    /// Adds ACL bindings through the controller, from any shard. Bindings already there
    /// are left as they are (Kafka answers them as created).
    pub async fn create_acls(self: &Rc<Self>, bindings: Vec<AclBinding>) -> Result<(), TopicError> {
        if self.id == CONTROLLER_SHARD {
            return self.controller_create_acls(bindings).await;
        }
        match self.mesh.call(CONTROLLER_SHARD, ShardRequest::CreateAcls { bindings }).await {
            ShardReply::CreateAcls(result) => result,
            other => panic!("create acls answered with {other:?}"),
        }
    }

    /// Removes, through the controller, the bindings each filter matches; per filter, the
    /// bindings it removed (a binding two filters match is reported by both).
    pub async fn delete_acls(
        self: &Rc<Self>,
        filters: Vec<AclFilter>,
    ) -> Result<Vec<Vec<AclBinding>>, TopicError> {
        if self.id == CONTROLLER_SHARD {
            return self.controller_delete_acls(filters).await;
        }
        match self.mesh.call(CONTROLLER_SHARD, ShardRequest::DeleteAcls { filters }).await {
            ShardReply::DeleteAcls(result) => result,
            other => panic!("delete acls answered with {other:?}"),
        }
    }

    pub(crate) async fn controller_create_acls(
        self: &Rc<Self>,
        bindings: Vec<AclBinding>,
    ) -> Result<(), TopicError> {
        assert_eq!(self.id, CONTROLLER_SHARD);
        let permit = self.controller_permit().await;
        let table = self.table();
        let mut new = Vec::with_capacity(bindings.len());
        for binding in bindings {
            if !table.acls.contains(&binding) && !new.contains(&binding) {
                tracing::info!(acl = %binding, "acl created");
                new.push(binding);
            }
        }
        let record = record_of(&table, TopicChange::CreateAcls(new));
        drop(table);
        self.commit_changes(permit, record, vec![Ok(())]).await.remove(0)
    }

    pub(crate) async fn controller_delete_acls(
        self: &Rc<Self>,
        filters: Vec<AclFilter>,
    ) -> Result<Vec<Vec<AclBinding>>, TopicError> {
        assert_eq!(self.id, CONTROLLER_SHARD);
        let permit = self.controller_permit().await;
        let table = self.table();
        let matched: Vec<Vec<AclBinding>> =
            filters.iter().map(|f| table.acls.matching(f).cloned().collect()).collect();
        let mut removed: Vec<AclBinding> = Vec::new();
        for binding in matched.iter().flatten() {
            if !removed.contains(binding) {
                tracing::info!(acl = %binding, "acl deleted");
                removed.push(binding.clone());
            }
        }
        let record = record_of(&table, TopicChange::DeleteAcls(removed));
        drop(table);
        self.commit_changes(permit, record, vec![Ok(())]).await.remove(0).map(|()| matched)
    }
}

/// The record of one ACL change, or None if it changes nothing.
fn record_of(table: &TopicTable, change: TopicChange) -> Option<ChangeRecord> {
    let empty = match &change {
        TopicChange::CreateAcls(b) | TopicChange::DeleteAcls(b) => b.is_empty(),
        _ => false,
    };
    (!empty).then(|| ChangeRecord { base_version: table.version, changes: vec![change] })
}

/// Applies `TopicChange::CreateAcls` (version + 1); refuses a binding already there.
pub(crate) fn apply_create(
    table: &mut TopicTable,
    bindings: &[AclBinding],
) -> Result<Option<TopicMeta>, String> {
    for binding in bindings {
        if !table.acls.insert(binding.clone()) {
            return Err(format!("an ACL change creates {binding} again"));
        }
    }
    table.version += 1;
    Ok(None)
}

/// Applies `TopicChange::DeleteAcls` (version + 1); refuses a binding not there.
pub(crate) fn apply_delete(
    table: &mut TopicTable,
    bindings: &[AclBinding],
) -> Result<Option<TopicMeta>, String> {
    for binding in bindings {
        if !table.acls.remove(binding) {
            return Err(format!("an ACL change deletes {binding}, not in the table"));
        }
    }
    table.version += 1;
    Ok(None)
}
