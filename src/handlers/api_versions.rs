//! ApiVersions (v0-v4): the versions table, as advertised. v4 differs from v3 only in
//! the supported features, of which none are sent.
//!
//! Default-valued tagged fields are left out of v3 responses (kafka-protocol omits them),
//! which librdkafka before 2.2.0 (Debian's kcat) needs.

use kafka_protocol::messages::api_versions_response::{ApiVersion, ApiVersionsResponse};

use super::SUPPORTED_APIS;

pub fn response(error_code: i16) -> ApiVersionsResponse {
    let api_keys = SUPPORTED_APIS
        .iter()
        .map(|a| {
            ApiVersion::default()
                .with_api_key(a.api_key as i16)
                .with_min_version(a.advertised_min)
                .with_max_version(a.max)
        })
        .collect();
    ApiVersionsResponse::default().with_error_code(error_code).with_api_keys(api_keys)
}
