//! Topic auto-creation (Metadata with allow_auto_topic_creation, Kafka's
//! auto.create.topics.enable) on a cluster node that is not the controller
//! (docs/replication.md, metadata group): the creation is forwarded to the controller's
//! node as a call between nodes (`node_calls`), whose receiving shard runs it through its
//! shard 0 as CreateTopics does there. Meanwhile the topic is LEADER_NOT_AVAILABLE
//! (retriable, as Kafka answers while it auto-creates) until the change record reaches
//! this node's table; the client asks again. A single node, and the controller's node,
//! create the topic before they answer, as before. The topic asks for replication factor
//! -1: the controller resolves it with its own `--default-replication-factor`
//! (`ShardConfig::with_defaults`), wherever the request arrived.
//!
//! Runs on any shard; not a hot path (one call per unknown topic a client asks for).
//! The ACL checks (CREATE) are the Metadata handler's, on the node the client asked; the
//! controller's node trusts its peer.
//!
//! Invariants:
//! 1. At most one forward per topic name is in flight from a shard, and at most
//!    `MAX_FORWARDS_IN_FLIGHT` in all: a client asking again while one is in flight
//!    forwards nothing more.
//! 2. A forward is never taken as a creation: the topic is answered from this node's
//!    table only, once the metadata group applied it here.

use std::rc::Rc;

use tracing::{debug, warn};

use crate::error::TopicError;
use crate::metadata::NewTopic;
use crate::node_calls::start_call;
use crate::replication::node_rpc::NodeRpc;
use crate::shard::Shard;

/// The bound of invariant 1, per shard.
const MAX_FORWARDS_IN_FLIGHT: usize = 256;

// The Kafka error codes a forwarded creation is answered with.
const NONE: i16 = 0;
const UNKNOWN_SERVER_ERROR: i16 = -1;
const TOPIC_ALREADY_EXISTS: i16 = 36;
const NOT_CONTROLLER: i16 = 41;

/// What an auto-creation did.
#[derive(Debug)]
pub enum AutoCreate {
    /// Created here (a single node, or this node is the controller), or refused.
    Done(Result<(), TopicError>),
    /// Forwarded to the controller, or no controller is known: not in this node's table
    /// yet (invariant 2); the client asks again.
    Pending,
}

impl Shard {
    /// Creates `topic` for a Metadata request that may auto-create it: here on a single
    /// node or at the controller, else forwarded to the controller's node (module docs).
    pub async fn auto_create_topic(self: &Rc<Self>, topic: NewTopic) -> AutoCreate {
        let own = self.config.node_id as u64;
        match self.controller_node().await {
            Err(()) => AutoCreate::Done(self.create_topic(topic).await),
            Ok(Some(node)) if node == own => AutoCreate::Done(self.create_topic(topic).await),
            Ok(Some(node)) => {
                self.forward_auto_create(node, topic);
                AutoCreate::Pending
            }
            Ok(None) => AutoCreate::Pending,
        }
    }

    async fn create_topic(self: &Rc<Self>, topic: NewTopic) -> Result<(), TopicError> {
        let result = self.create_topics(vec![topic], false).await.pop();
        result.expect("one result per topic")
    }

    /// Sends `topic` to the controller on `node`, unless a forward of it is in flight
    /// (invariant 1); the answer is only logged (invariant 2).
    fn forward_auto_create(&self, node: u64, topic: NewTopic) {
        // Partition groups start with the node; before then the client just asks again.
        let Some(groups) = self.partition_groups() else { return };
        let name = topic.name.clone();
        {
            let mut in_flight = groups.auto_creates.borrow_mut();
            if in_flight.len() >= MAX_FORWARDS_IN_FLIGHT || !in_flight.insert(name.clone()) {
                return;
            }
        }
        debug!(topic = %name, node, "auto-creation forwarded to the controller");
        let call =
            start_call(&groups, node, |request_id| NodeRpc::CreateTopic { request_id, topic });
        glommio::spawn_local(async move {
            let answer = call.wait().await;
            groups.auto_creates.borrow_mut().remove(&name);
            match answer {
                Some(NodeRpc::CreateTopicAnswer {
                    error_code: NONE | TOPIC_ALREADY_EXISTS,
                    ..
                }) => {
                    debug!(topic = %name, node, "the controller has the auto-created topic")
                }
                Some(NodeRpc::CreateTopicAnswer { error_code, message, .. }) => {
                    let why = "the controller refused a forwarded auto-creation";
                    warn!(topic = %name, node, error_code, %message, "{why}")
                }
                // Unanswered (`node_calls` logged it), or not an answer to a creation.
                other => debug!(topic = %name, node, ?other, "a forwarded auto-creation failed"),
            }
        })
        .detach();
    }
}

/// The answer to a creation forwarded from another node, on the shard that received it:
/// created through this node's shard 0, which answers NOT_CONTROLLER unless this node
/// leads the metadata group.
pub(crate) async fn answer_create(shard: &Rc<Shard>, request_id: u64, topic: NewTopic) -> NodeRpc {
    let (error_code, message) = match shard.create_topic(topic).await {
        Ok(()) => (NONE, String::new()),
        Err(e @ TopicError::AlreadyExists(_)) => (TOPIC_ALREADY_EXISTS, e.to_string()),
        Err(e @ TopicError::NotController(_)) => (NOT_CONTROLLER, e.to_string()),
        Err(e) => (UNKNOWN_SERVER_ERROR, e.to_string()),
    };
    NodeRpc::CreateTopicAnswer { request_id, error_code, message }
}
