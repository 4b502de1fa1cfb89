//! DescribeCluster (v0-v1): the cluster id, the controller (shard 0 of the metadata
//! group's leader, `metadata.rs`) and every shard of every node as a broker, with the
//! same host and port as Metadata advertises. Authorized operations are
//! not computed (the response carries Kafka's "not requested" value, i32::MIN).

use std::rc::Rc;

use kafka_protocol::messages::describe_cluster_request::DescribeClusterRequest;
use kafka_protocol::messages::describe_cluster_response::{
    DescribeClusterBroker, DescribeClusterResponse,
};
use kafka_protocol::messages::{BrokerId, ResponseKind};
use shardlog_net::Reply;

use super::errors;
use super::metadata::{advertised_brokers, controller_id, CLUSTER_ID};
use super::{str_bytes, KafkaHandler};

/// DescribeCluster's endpoint types (v1+).
const BROKERS_ENDPOINT: i8 = 1;
const CONTROLLERS_ENDPOINT: i8 = 2;

pub fn handle(handler: Rc<KafkaHandler>, request: DescribeClusterRequest, version: i16) -> Reply {
    Box::pin(async move {
        let response = DescribeClusterResponse::default()
            .with_cluster_id(str_bytes(CLUSTER_ID))
            .with_controller_id(BrokerId(controller_id(&handler.shard).await));
        let response = match request.endpoint_type {
            BROKERS_ENDPOINT => response.with_brokers(brokers(&handler)),
            // Kafka brokers answer the same: controllers are reached through a controller.
            CONTROLLERS_ENDPOINT => response
                .with_error_code(errors::UNSUPPORTED_ENDPOINT_TYPE)
                .with_error_message(Some(str_bytes(
                    "this broker is not a controller endpoint: ask for brokers (endpoint type 1)",
                ))),
            other => response.with_error_code(errors::INVALID_REQUEST).with_error_message(Some(
                str_bytes(&format!("unknown endpoint type {other} (1 brokers, 2 controllers)")),
            )),
        };
        // The response's endpoint_type exists from v1 (the encoder refuses it before).
        let response = if version >= 1 {
            response.with_endpoint_type(request.endpoint_type)
        } else {
            response
        };
        Some(ResponseKind::DescribeCluster(response))
    })
}

fn brokers(handler: &KafkaHandler) -> Vec<DescribeClusterBroker> {
    advertised_brokers(handler)
        .into_iter()
        .map(|b| {
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(b.id))
                .with_host(str_bytes(&b.host))
                .with_port(b.port)
        })
        .collect()
}
