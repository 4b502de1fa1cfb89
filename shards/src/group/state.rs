//! The classic consumer-group state machine (Kafka's group membership protocol), as a
//! plain struct: no `.await`, no clock of its own (`now_ms` is an argument), no IO.
//! Requests that must wait (JoinGroup until the rebalance completes, a follower's
//! SyncGroup until the leader's) are parked by the caller; the machine answers them later
//! through [`Effect`]s.
//!
//! States: Empty -> PreparingRebalance -> CompletingRebalance -> Stable (-> Dead when
//! deleted). A rebalance completes when every known member has rejoined and every member
//! id handed out with MEMBER_ID_REQUIRED has joined or expired (as Kafka's
//! `hasAllMembersJoined`: consumers that start together land in one generation), or when
//! the largest rebalance timeout passes (members that did not rejoin are removed).
//!
//! Invariants (asserted):
//! 1. In CompletingRebalance and Stable there is a leader and it is a member.
//! 2. The generation only grows.
//! 3. Empty has no members.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::error::GroupError;

/// Group states, named as Kafka names them in DescribeGroups / ListGroups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// One member.
#[derive(Clone, Debug)]
pub struct Member {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: u64,
    pub rebalance_timeout_ms: u64,
    pub protocol_type: String,
    /// (protocol name, metadata) in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    pub last_heard_ms: u64,
    /// Joined during the current PreparingRebalance (its JoinGroup is parked).
    pub joined: bool,
    /// Its SyncGroup is parked, waiting for the leader's.
    pub awaiting_sync: bool,
}

/// A JoinGroup as the machine sees it.
#[derive(Clone, Debug)]
pub struct JoinRequest {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: u64,
    pub rebalance_timeout_ms: u64,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// JoinGroup v4+: a member without an id first gets MEMBER_ID_REQUIRED and its id.
    pub require_known_member_id: bool,
}

/// What a JoinGroup is answered with.
#[derive(Clone, Debug, PartialEq)]
pub struct JoinOutcome {
    pub result: Result<(), GroupError>,
    pub member_id: String,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub leader: String,
    /// Only for the leader: every member with its metadata for the chosen protocol.
    pub members: Vec<(String, Option<String>, Bytes)>,
}

impl JoinOutcome {
    fn error(member_id: &str, error: GroupError) -> JoinOutcome {
        JoinOutcome {
            result: Err(error),
            member_id: member_id.to_string(),
            generation: -1,
            protocol_type: None,
            protocol: None,
            leader: String::new(),
            members: Vec::new(),
        }
    }
}

/// An answer the machine owes to a parked request.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    Join(JoinOutcome),
    Sync { member_id: String, result: Result<Bytes, GroupError> },
}

/// Immediate answer, or "parked: the answer comes as an [`Effect`] for this member".
#[derive(Clone, Debug, PartialEq)]
pub enum Step<T> {
    Now(T),
    Parked { member_id: String },
}

/// One consumer group's membership.
#[derive(Clone, Debug)]
pub struct Group {
    pub group_id: String,
    pub state: GroupState,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    /// In join order (the first member becomes leader).
    pub members: Vec<Member>,
    /// Ids handed out with MEMBER_ID_REQUIRED, with the time they expire.
    pending: BTreeMap<String, u64>,
    rebalance_deadline_ms: Option<u64>,
    next_member_number: u64,
}

impl Group {
    pub fn new(group_id: &str) -> Group {
        Group {
            group_id: group_id.to_string(),
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: Vec::new(),
            pending: BTreeMap::new(),
            rebalance_deadline_ms: None,
            next_member_number: 0,
        }
    }

    pub fn member(&self, member_id: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.member_id == member_id)
    }

    fn member_mut(&mut self, member_id: &str) -> Option<&mut Member> {
        self.members.iter_mut().find(|m| m.member_id == member_id)
    }

    fn new_member_id(&mut self, client_id: &str, now_ms: u64) -> String {
        self.next_member_number += 1;
        format!("{client_id}-{now_ms:x}-{}", self.next_member_number)
    }

    /// JoinGroup.
    pub fn join(&mut self, now_ms: u64, request: JoinRequest) -> (Step<JoinOutcome>, Vec<Effect>) {
        let mut effects = Vec::new();
        if let Err(e) = self.check_protocols(&request) {
            return (Step::Now(JoinOutcome::error(&request.member_id, e)), effects);
        }
        let mut member_id = request.member_id.clone();
        if member_id.is_empty() {
            let static_member = request
                .group_instance_id
                .as_ref()
                .and_then(|i| self.members.iter().find(|m| m.group_instance_id.as_ref() == Some(i)))
                .map(|m| m.member_id.clone());
            if let Some(old_id) = static_member {
                return self.rejoin_static(now_ms, &old_id, request);
            }
            member_id = self.new_member_id(&request.client_id, now_ms);
            if request.require_known_member_id && request.group_instance_id.is_none() {
                self.pending.insert(member_id.clone(), now_ms + request.session_timeout_ms);
                let outcome = JoinOutcome::error(&member_id, GroupError::MemberIdRequired);
                return (Step::Now(outcome), effects);
            }
        } else if self.member(&member_id).is_none() && self.pending.remove(&member_id).is_none() {
            let outcome = JoinOutcome::error(&member_id, GroupError::UnknownMemberId);
            return (Step::Now(outcome), effects);
        }
        if let Some(existing) = self.member(&member_id) {
            let unchanged = existing.protocols == request.protocols;
            let is_leader = self.leader.as_deref() == Some(member_id.as_str());
            if self.state == GroupState::Stable && unchanged && !is_leader {
                self.member_mut(&member_id).unwrap().last_heard_ms = now_ms;
                return (Step::Now(self.join_outcome(&member_id)), effects);
            }
        }
        self.upsert_member(now_ms, &member_id, &request);
        self.member_mut(&member_id).unwrap().joined = true;
        if self.state != GroupState::PreparingRebalance {
            self.prepare_rebalance(now_ms, &mut effects);
        }
        self.maybe_complete_rebalance(now_ms, false, &mut effects);
        Self::take_own(&member_id, effects)
    }

    /// A static member (known group.instance.id) rejoining with a fresh member id.
    fn rejoin_static(
        &mut self,
        now_ms: u64,
        old_id: &str,
        request: JoinRequest,
    ) -> (Step<JoinOutcome>, Vec<Effect>) {
        let mut effects = Vec::new();
        let new_id = self.new_member_id(&request.client_id, now_ms);
        let was_leader = self.leader.as_deref() == Some(old_id);
        let unchanged = self.member(old_id).is_some_and(|m| m.protocols == request.protocols);
        let member = self.member_mut(old_id).unwrap();
        member.member_id = new_id.clone();
        if was_leader {
            self.leader = Some(new_id.clone());
        }
        if self.state == GroupState::Stable && unchanged && !was_leader {
            self.member_mut(&new_id).unwrap().last_heard_ms = now_ms;
            return (Step::Now(self.join_outcome(&new_id)), effects);
        }
        self.upsert_member(now_ms, &new_id, &request);
        self.member_mut(&new_id).unwrap().joined = true;
        if self.state != GroupState::PreparingRebalance {
            self.prepare_rebalance(now_ms, &mut effects);
        }
        self.maybe_complete_rebalance(now_ms, false, &mut effects);
        Self::take_own(&new_id, effects)
    }

    /// If the effects answer `member_id`'s own join, answer it now instead of parking.
    fn take_own(member_id: &str, mut effects: Vec<Effect>) -> (Step<JoinOutcome>, Vec<Effect>) {
        let own =
            effects.iter().position(|e| matches!(e, Effect::Join(o) if o.member_id == member_id));
        match own {
            Some(index) => match effects.remove(index) {
                Effect::Join(outcome) => (Step::Now(outcome), effects),
                Effect::Sync { .. } => unreachable!(),
            },
            None => (Step::Parked { member_id: member_id.to_string() }, effects),
        }
    }

    fn check_protocols(&self, request: &JoinRequest) -> Result<(), GroupError> {
        if request.protocols.is_empty() || request.protocol_type.is_empty() {
            return Err(GroupError::InconsistentGroupProtocol);
        }
        if self.members.is_empty() {
            return Ok(());
        }
        if self.protocol_type.as_deref() != Some(request.protocol_type.as_str()) {
            return Err(GroupError::InconsistentGroupProtocol);
        }
        let others_support = |name: &str| {
            self.members
                .iter()
                .filter(|m| m.member_id != request.member_id)
                .all(|m| m.protocols.iter().any(|(n, _)| n == name))
        };
        if request.protocols.iter().any(|(name, _)| others_support(name)) {
            Ok(())
        } else {
            Err(GroupError::InconsistentGroupProtocol)
        }
    }

    fn upsert_member(&mut self, now_ms: u64, member_id: &str, request: &JoinRequest) {
        if self.members.is_empty() {
            self.protocol_type = Some(request.protocol_type.clone());
        }
        match self.member_mut(member_id) {
            Some(member) => {
                member.protocols = request.protocols.clone();
                member.session_timeout_ms = request.session_timeout_ms;
                member.rebalance_timeout_ms = request.rebalance_timeout_ms;
                member.last_heard_ms = now_ms;
            }
            None => self.members.push(Member {
                member_id: member_id.to_string(),
                group_instance_id: request.group_instance_id.clone(),
                client_id: request.client_id.clone(),
                client_host: request.client_host.clone(),
                session_timeout_ms: request.session_timeout_ms,
                rebalance_timeout_ms: request.rebalance_timeout_ms,
                protocol_type: request.protocol_type.clone(),
                protocols: request.protocols.clone(),
                assignment: Bytes::new(),
                last_heard_ms: now_ms,
                joined: false,
                awaiting_sync: false,
            }),
        }
    }

    fn prepare_rebalance(&mut self, now_ms: u64, effects: &mut Vec<Effect>) {
        // Followers parked in SyncGroup must rejoin.
        for member in self.members.iter_mut().filter(|m| m.awaiting_sync) {
            member.awaiting_sync = false;
            effects.push(Effect::Sync {
                member_id: member.member_id.clone(),
                result: Err(GroupError::RebalanceInProgress),
            });
        }
        let timeout = self.members.iter().map(|m| m.rebalance_timeout_ms).max().unwrap_or(0);
        self.rebalance_deadline_ms = Some(now_ms + timeout);
        self.state = GroupState::PreparingRebalance;
    }

    /// Completes the rebalance if every member rejoined (or the deadline passed).
    fn maybe_complete_rebalance(
        &mut self,
        now_ms: u64,
        deadline_passed: bool,
        effects: &mut Vec<Effect>,
    ) {
        if self.state != GroupState::PreparingRebalance {
            return;
        }
        // A member told its id (MEMBER_ID_REQUIRED) is about to join: wait for it too, or
        // it arrives just after the generation and forces a second rebalance at once.
        let all_joined = self.members.iter().all(|m| m.joined) && self.pending.is_empty();
        if !all_joined && !deadline_passed {
            return;
        }
        self.members.retain(|m| m.joined);
        self.generation += 1;
        self.rebalance_deadline_ms = None;
        if self.members.is_empty() {
            self.become_empty();
            return;
        }
        self.protocol = Some(self.select_protocol());
        let leader_present = self.leader.as_ref().is_some_and(|l| self.member(l).is_some());
        if !leader_present {
            self.leader = Some(self.members[0].member_id.clone());
        }
        self.state = GroupState::CompletingRebalance;
        let ids: Vec<String> = self.members.iter().map(|m| m.member_id.clone()).collect();
        for id in ids {
            let outcome = self.join_outcome(&id);
            let member = self.member_mut(&id).unwrap();
            member.joined = false;
            member.last_heard_ms = now_ms;
            effects.push(Effect::Join(outcome));
        }
        self.check_invariants();
    }

    fn become_empty(&mut self) {
        self.state = GroupState::Empty;
        self.leader = None;
        self.protocol = None;
        self.protocol_type = None;
        self.rebalance_deadline_ms = None;
        self.check_invariants();
    }

    /// The first protocol of the first member that every member supports.
    fn select_protocol(&self) -> String {
        let first = &self.members[0];
        first
            .protocols
            .iter()
            .map(|(name, _)| name)
            .find(|name| self.members.iter().all(|m| m.protocols.iter().any(|(n, _)| n == *name)))
            .unwrap_or(&first.protocols[0].0)
            .clone()
    }

    fn join_outcome(&self, member_id: &str) -> JoinOutcome {
        let leader = self.leader.clone().unwrap_or_default();
        let protocol = self.protocol.clone();
        let members = if leader == member_id {
            let name = protocol.clone().unwrap_or_default();
            self.members
                .iter()
                .map(|m| {
                    let metadata = m
                        .protocols
                        .iter()
                        .find(|(n, _)| *n == name)
                        .map(|(_, md)| md.clone())
                        .unwrap_or_default();
                    (m.member_id.clone(), m.group_instance_id.clone(), metadata)
                })
                .collect()
        } else {
            Vec::new()
        };
        JoinOutcome {
            result: Ok(()),
            member_id: member_id.to_string(),
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol,
            leader,
            members,
        }
    }

    fn check_member(&self, generation: i32, member_id: &str) -> Result<(), GroupError> {
        if self.member(member_id).is_none() {
            return Err(GroupError::UnknownMemberId);
        }
        if generation != self.generation {
            return Err(GroupError::IllegalGeneration);
        }
        Ok(())
    }

    /// SyncGroup.
    pub fn sync(
        &mut self,
        now_ms: u64,
        generation: i32,
        member_id: &str,
        assignments: Vec<(String, Bytes)>,
    ) -> (Step<Result<Bytes, GroupError>>, Vec<Effect>) {
        let mut effects = Vec::new();
        if let Err(e) = self.check_member(generation, member_id) {
            return (Step::Now(Err(e)), effects);
        }
        self.member_mut(member_id).unwrap().last_heard_ms = now_ms;
        match self.state {
            GroupState::CompletingRebalance => {
                if self.leader.as_deref() != Some(member_id) {
                    self.member_mut(member_id).unwrap().awaiting_sync = true;
                    return (Step::Parked { member_id: member_id.to_string() }, effects);
                }
                for member in &mut self.members {
                    member.assignment = assignments
                        .iter()
                        .find(|(id, _)| *id == member.member_id)
                        .map(|(_, a)| a.clone())
                        .unwrap_or_default();
                }
                self.state = GroupState::Stable;
                for member in self.members.iter_mut().filter(|m| m.awaiting_sync) {
                    member.awaiting_sync = false;
                    effects.push(Effect::Sync {
                        member_id: member.member_id.clone(),
                        result: Ok(member.assignment.clone()),
                    });
                }
                let own = self.member(member_id).unwrap().assignment.clone();
                (Step::Now(Ok(own)), effects)
            }
            GroupState::Stable => {
                (Step::Now(Ok(self.member(member_id).unwrap().assignment.clone())), effects)
            }
            GroupState::PreparingRebalance => {
                (Step::Now(Err(GroupError::RebalanceInProgress)), effects)
            }
            GroupState::Empty | GroupState::Dead => {
                (Step::Now(Err(GroupError::UnknownMemberId)), effects)
            }
        }
    }

    /// Heartbeat.
    pub fn heartbeat(
        &mut self,
        now_ms: u64,
        generation: i32,
        member_id: &str,
    ) -> Result<(), GroupError> {
        self.check_member(generation, member_id)?;
        self.member_mut(member_id).unwrap().last_heard_ms = now_ms;
        match self.state {
            GroupState::PreparingRebalance => Err(GroupError::RebalanceInProgress),
            GroupState::CompletingRebalance | GroupState::Stable => Ok(()),
            GroupState::Empty | GroupState::Dead => Err(GroupError::UnknownMemberId),
        }
    }

    /// LeaveGroup for one member (by member id, or by instance id for static members).
    pub fn leave(
        &mut self,
        now_ms: u64,
        member_id: &str,
        group_instance_id: Option<&str>,
    ) -> (Result<(), GroupError>, Vec<Effect>) {
        let mut effects = Vec::new();
        let found = self.members.iter().position(|m| {
            (!member_id.is_empty() && m.member_id == member_id)
                || (member_id.is_empty()
                    && group_instance_id.is_some()
                    && m.group_instance_id.as_deref() == group_instance_id)
        });
        let Some(index) = found else {
            return (Err(GroupError::UnknownMemberId), effects);
        };
        let member = self.members.remove(index);
        if member.joined {
            effects.push(Effect::Join(JoinOutcome::error(
                &member.member_id,
                GroupError::UnknownMemberId,
            )));
        }
        self.after_removal(now_ms, &mut effects);
        (Ok(()), effects)
    }

    fn after_removal(&mut self, now_ms: u64, effects: &mut Vec<Effect>) {
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance if self.members.is_empty() => {
                self.generation += 1;
                self.become_empty();
            }
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.prepare_rebalance(now_ms, effects);
            }
            GroupState::PreparingRebalance => {
                self.maybe_complete_rebalance(now_ms, false, effects);
            }
            GroupState::Empty | GroupState::Dead => {}
        }
    }

    /// Expires silent members and pending ids, and completes an overdue rebalance.
    pub fn tick(&mut self, now_ms: u64) -> Vec<Effect> {
        let mut effects = Vec::new();
        let pending_before = self.pending.len();
        self.pending.retain(|_, expires| *expires > now_ms);
        if self.pending.len() < pending_before {
            self.maybe_complete_rebalance(now_ms, false, &mut effects);
        }
        let expired: Vec<String> = self
            .members
            .iter()
            .filter(|m| !m.joined && now_ms > m.last_heard_ms + m.session_timeout_ms)
            .map(|m| m.member_id.clone())
            .collect();
        for id in expired {
            if let Some(member) = self.member(&id) {
                if member.awaiting_sync {
                    effects.push(Effect::Sync {
                        member_id: id.clone(),
                        result: Err(GroupError::UnknownMemberId),
                    });
                }
            }
            self.members.retain(|m| m.member_id != id);
            self.after_removal(now_ms, &mut effects);
        }
        if self.rebalance_deadline_ms.is_some_and(|d| now_ms >= d) {
            self.maybe_complete_rebalance(now_ms, true, &mut effects);
        }
        effects
    }

    /// Whether an OffsetCommit from this member at this generation may be applied.
    pub fn check_commit(
        &mut self,
        now_ms: u64,
        generation: i32,
        member_id: &str,
    ) -> Result<(), GroupError> {
        if generation < 0 && member_id.is_empty() && self.members.is_empty() {
            return Ok(()); // a standalone consumer (assign + commit, no membership)
        }
        self.check_member(generation, member_id)?;
        match self.state {
            GroupState::Stable => {
                self.member_mut(member_id).unwrap().last_heard_ms = now_ms;
                Ok(())
            }
            GroupState::PreparingRebalance | GroupState::CompletingRebalance => {
                Err(GroupError::RebalanceInProgress)
            }
            GroupState::Empty | GroupState::Dead => Err(GroupError::UnknownMemberId),
        }
    }

    /// Topics the members are subscribed to, when the protocol type is "consumer" and the
    /// metadata parses (Kafka's ConsumerProtocolSubscription: version, topic array, ...).
    pub fn subscribed_topics(&self) -> Vec<String> {
        let mut topics = Vec::new();
        if self.protocol_type.as_deref() != Some("consumer") {
            return topics;
        }
        let protocol = self.protocol.clone().unwrap_or_default();
        for member in &self.members {
            if let Some((_, metadata)) = member.protocols.iter().find(|(n, _)| *n == protocol) {
                topics.extend(parse_subscription_topics(metadata));
            }
        }
        topics.sort();
        topics.dedup();
        topics
    }

    fn check_invariants(&self) {
        match self.state {
            GroupState::CompletingRebalance | GroupState::Stable => {
                let leader = self.leader.as_ref().expect("invariant 1: a leader");
                assert!(self.member(leader).is_some(), "invariant 1: the leader is a member");
            }
            GroupState::Empty => assert!(self.members.is_empty(), "invariant 3"),
            _ => {}
        }
    }
}

/// Topic names of a ConsumerProtocolSubscription (int16 version, array of strings).
fn parse_subscription_topics(metadata: &[u8]) -> Vec<String> {
    let mut topics = Vec::new();
    if metadata.len() < 6 {
        return topics;
    }
    let count = i32::from_be_bytes([metadata[2], metadata[3], metadata[4], metadata[5]]);
    let mut at = 6usize;
    for _ in 0..count.clamp(0, 10_000) {
        let Some(len_bytes) = metadata.get(at..at + 2) else { break };
        let len = i16::from_be_bytes([len_bytes[0], len_bytes[1]]).max(0) as usize;
        let Some(name) = metadata.get(at + 2..at + 2 + len) else { break };
        topics.push(String::from_utf8_lossy(name).into_owned());
        at += 2 + len;
    }
    topics
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(member_id: &str, client: &str) -> JoinRequest {
        JoinRequest {
            member_id: member_id.to_string(),
            group_instance_id: None,
            client_id: client.to_string(),
            client_host: "/127.0.0.1".to_string(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 30_000,
            protocol_type: "consumer".to_string(),
            protocols: vec![("range".to_string(), Bytes::from_static(b"md"))],
            require_known_member_id: true,
        }
    }

    /// Joins a brand-new member the v4+ way (MEMBER_ID_REQUIRED first); returns its id.
    fn new_member(
        group: &mut Group,
        now: u64,
        client: &str,
    ) -> (String, Step<JoinOutcome>, Vec<Effect>) {
        let (step, _) = group.join(now, request("", client));
        let Step::Now(first) = step else { panic!("first join must answer now") };
        assert_eq!(first.result, Err(GroupError::MemberIdRequired));
        let id = first.member_id.clone();
        let (step, effects) = group.join(now, request(&id, client));
        (id, step, effects)
    }

    fn stable_group_of_one(now: u64) -> (Group, String) {
        let mut group = Group::new("g");
        let (a, step, _) = new_member(&mut group, now, "a");
        let Step::Now(outcome) = step else { panic!("a lone member completes the rebalance") };
        assert_eq!((outcome.generation, outcome.leader.as_str()), (1, a.as_str()));
        let (step, _) = group.sync(now, 1, &a, vec![(a.clone(), Bytes::from_static(b"all"))]);
        assert_eq!(step, Step::Now(Ok(Bytes::from_static(b"all"))));
        assert_eq!(group.state, GroupState::Stable);
        (group, a)
    }

    #[test]
    fn a_lone_member_becomes_leader_of_generation_one() {
        let (group, a) = stable_group_of_one(0);
        assert_eq!(group.leader.as_deref(), Some(a.as_str()));
        assert_eq!(group.generation, 1);
    }

    #[test]
    fn a_second_member_triggers_a_rebalance_that_completes_when_the_first_rejoins() {
        let (mut group, a) = stable_group_of_one(0);
        let (b, step, effects) = new_member(&mut group, 10, "b");
        assert!(matches!(step, Step::Parked { .. }) && effects.is_empty());
        assert_eq!(group.state, GroupState::PreparingRebalance);
        assert_eq!(group.heartbeat(20, 1, &a), Err(GroupError::RebalanceInProgress));
        let (step, effects) = group.join(30, request(&a, "a"));
        let Step::Now(leader) = step else { panic!("the last rejoin completes the rebalance") };
        assert_eq!((leader.generation, leader.members.len()), (2, 2));
        assert_eq!(effects.len(), 1, "b's parked join is answered");
        assert!(matches!(&effects[0], Effect::Join(o) if o.member_id == b && o.members.is_empty()));
        assert_eq!(group.state, GroupState::CompletingRebalance);
    }

    #[test]
    fn consumers_told_their_ids_together_land_in_one_first_generation() {
        let mut group = Group::new("g");
        let (step, _) = group.join(0, request("", "a"));
        let Step::Now(a) = step else { panic!("MEMBER_ID_REQUIRED answers now") };
        let (step, _) = group.join(1, request("", "b"));
        let Step::Now(b) = step else { panic!("MEMBER_ID_REQUIRED answers now") };
        let (step, effects) = group.join(2, request(&a.member_id, "a"));
        assert!(matches!(step, Step::Parked { .. }) && effects.is_empty(), "b is on its way");
        let (step, effects) = group.join(3, request(&b.member_id, "b"));
        let Step::Now(b_joined) = step else { panic!("the last join completes the rebalance") };
        assert_eq!(b_joined.generation, 1);
        let [Effect::Join(leader)] = effects.as_slice() else { panic!("{effects:?}") };
        assert_eq!((leader.generation, leader.members.len()), (1, 2));
        assert_eq!(leader.leader, a.member_id);
    }

    #[test]
    fn an_id_never_used_holds_the_rebalance_only_until_its_session_timeout() {
        let mut group = Group::new("g");
        let (a, _, _) = {
            let (step, _) = group.join(0, request("", "gone"));
            assert!(matches!(step, Step::Now(JoinOutcome { result: Err(_), .. })));
            new_member(&mut group, 0, "a")
        };
        assert_eq!(group.state, GroupState::PreparingRebalance, "waits for the other id");
        assert!(group.tick(5_000).is_empty(), "the other id is still within its session");
        let effects = group.tick(10_001);
        let [Effect::Join(outcome)] = effects.as_slice() else { panic!("{effects:?}") };
        assert_eq!((outcome.member_id.as_str(), outcome.generation), (a.as_str(), 1));
        assert_eq!(outcome.members.len(), 1);
    }

    #[test]
    fn a_followers_sync_waits_for_the_leaders_assignment() {
        let (mut group, a) = stable_group_of_one(0);
        let (b, _, _) = new_member(&mut group, 10, "b");
        group.join(30, request(&a, "a"));
        let (step, effects) = group.sync(40, 2, &b, vec![]);
        assert!(matches!(step, Step::Parked { .. }) && effects.is_empty());
        let assignments =
            vec![(a.clone(), Bytes::from_static(b"p0")), (b.clone(), Bytes::from_static(b"p1"))];
        let (step, effects) = group.sync(50, 2, &a, assignments);
        assert_eq!(step, Step::Now(Ok(Bytes::from_static(b"p0"))));
        assert_eq!(
            effects,
            vec![Effect::Sync { member_id: b, result: Ok(Bytes::from_static(b"p1")) }]
        );
        assert_eq!(group.state, GroupState::Stable);
    }

    #[test]
    fn errors_for_wrong_generation_unknown_member_and_rebalance() {
        let (mut group, a) = stable_group_of_one(0);
        assert_eq!(group.heartbeat(1, 7, &a), Err(GroupError::IllegalGeneration));
        assert_eq!(group.heartbeat(1, 1, "nobody"), Err(GroupError::UnknownMemberId));
        assert_eq!(
            group.join(1, request("nobody", "x")).0,
            Step::Now(JoinOutcome::error("nobody", GroupError::UnknownMemberId))
        );
        assert_eq!(group.check_commit(1, 1, &a), Ok(()));
        new_member(&mut group, 2, "b");
        assert_eq!(group.check_commit(3, 1, &a), Err(GroupError::RebalanceInProgress));
        let mut other = request("", "c");
        other.protocol_type = "connect".to_string();
        let (step, _) = group.join(4, other);
        assert!(
            matches!(step, Step::Now(o) if o.result == Err(GroupError::InconsistentGroupProtocol))
        );
    }

    #[test]
    fn a_silent_member_is_removed_after_its_session_timeout() {
        let (mut group, a) = stable_group_of_one(0);
        let (b, _, _) = new_member(&mut group, 10, "b");
        group.join(20, request(&a, "a"));
        group.sync(30, 2, &a, vec![]);
        assert!(group.tick(10_000).is_empty(), "still within the session");
        group.heartbeat(10_000, 2, &a).unwrap();
        group.tick(10_031);
        assert!(group.member(&b).is_none(), "b stopped heartbeating");
        assert_eq!(group.state, GroupState::PreparingRebalance);
        let (step, _) = group.join(10_040, request(&a, "a"));
        assert!(matches!(step, Step::Now(o) if o.generation == 3 && o.members.len() == 1));
    }

    #[test]
    fn a_member_that_does_not_rejoin_is_dropped_at_the_rebalance_deadline() {
        let (mut group, a) = stable_group_of_one(0);
        let (b, step, _) = new_member(&mut group, 10, "b");
        assert!(matches!(step, Step::Parked { .. }));
        let effects = group.tick(10 + 30_000);
        assert!(group.member(&a).is_none());
        assert!(matches!(&effects[..], [Effect::Join(o)] if o.member_id == b && o.leader == b));
    }

    #[test]
    fn the_last_member_leaving_empties_the_group() {
        let (mut group, a) = stable_group_of_one(0);
        assert_eq!(group.leave(5, &a, None).0, Ok(()));
        assert_eq!((group.state, group.generation), (GroupState::Empty, 2));
        assert_eq!(group.check_commit(6, -1, ""), Ok(()), "standalone commits on an empty group");
        assert_eq!(group.leave(7, &a, None).0, Err(GroupError::UnknownMemberId));
    }

    #[test]
    fn a_static_follower_rejoining_with_a_new_id_does_not_rebalance() {
        let mut group = Group::new("g");
        let mut leader = request("", "a");
        leader.group_instance_id = Some("i-a".into());
        let (Step::Now(a), _) = group.join(0, leader.clone()) else { panic!() };
        let mut follower = request("", "b");
        follower.group_instance_id = Some("i-b".into());
        let (step, _) = group.join(1, follower.clone());
        assert!(matches!(step, Step::Parked { .. }));
        group.join(2, JoinRequest { member_id: a.member_id.clone(), ..leader });
        group.sync(3, 2, &a.member_id, vec![]);
        assert_eq!(group.state, GroupState::Stable);
        let (step, _) = group.join(4, follower);
        let Step::Now(outcome) = step else { panic!("answered at once") };
        assert_eq!((outcome.generation, group.state), (2, GroupState::Stable));
    }

    #[test]
    fn subscription_metadata_names_the_subscribed_topics() {
        let mut metadata = vec![0, 1, 0, 0, 0, 2];
        for topic in ["a", "bc"] {
            metadata.extend_from_slice(&(topic.len() as i16).to_be_bytes());
            metadata.extend_from_slice(topic.as_bytes());
        }
        assert_eq!(parse_subscription_topics(&metadata), vec!["a", "bc"]);
        assert!(parse_subscription_topics(&[0, 1, 0x7f, 0xff, 0xff, 0xff, 0, 9]).is_empty());
    }
}
