//! Kafka error codes in words, for the admin commands: what went wrong to what, then the
//! code's name as Kafka spells it, e.g. "topic 'x' already exists (TOPIC_ALREADY_EXISTS)".

use kafka_protocol::error::ResponseError;

/// Describes error `code` that the broker returned for `subject` ("topic 'x'", "group 'g'"),
/// with the broker's own message when it sent one.
pub fn api_error(code: i16, subject: &str, broker_message: Option<&str>) -> String {
    let Some(error) = ResponseError::try_from_code(code) else {
        return format!("{subject}: no error");
    };
    // These sentences say all there is; the broker's message would repeat them.
    let complete = match error {
        ResponseError::TopicAlreadyExists => Some(format!("{subject} already exists")),
        ResponseError::UnknownTopicOrPartition => Some(format!("{subject} does not exist")),
        ResponseError::GroupIdNotFound => Some(format!("{subject} does not exist")),
        ResponseError::TransactionalIdNotFound => Some(format!("{subject} does not exist")),
        ResponseError::NonEmptyGroup => Some(format!("{subject} still has members")),
        _ => None,
    };
    let sentence = complete.unwrap_or_else(|| {
        let sentence = match error {
            ResponseError::InvalidTopicException => format!("{subject} is not a valid topic name"),
            ResponseError::UnsupportedVersion => format!("{subject}: not supported by the broker"),
            ResponseError::Unknown(code) => format!("{subject}: unknown Kafka error code {code}"),
            other => format!("{subject}: {}", description(other)),
        };
        match broker_message.filter(|m| !m.is_empty()) {
            Some(message) => format!("{sentence}: {message}"),
            None => sentence,
        }
    });
    format!("{sentence} ({})", error_name(error))
}

/// `Ok` for error code 0 (NONE), else the error in words (see [`api_error`]).
pub fn check(code: i16, subject: &str, broker_message: Option<&str>) -> Result<(), String> {
    match code {
        0 => Ok(()),
        _ => Err(api_error(code, subject, broker_message)),
    }
}

/// Kafka's own sentence for an error, lower-cased at the start and without its full stop.
fn description(error: ResponseError) -> String {
    let text = error_sentence(error);
    let text = text.trim_end_matches('.');
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The sentences of the codes an admin command can meet; others fall back to the name.
fn error_sentence(error: ResponseError) -> &'static str {
    match error {
        ResponseError::InvalidPartitions => "The number of partitions is invalid.",
        ResponseError::InvalidReplicationFactor => "The replication factor is invalid.",
        ResponseError::InvalidConfig => "The configuration is invalid.",
        ResponseError::InvalidRequest => "The broker refused the request as malformed.",
        ResponseError::NotCoordinator => "This broker is not the group's coordinator.",
        ResponseError::CoordinatorNotAvailable => "The group coordinator is not available.",
        ResponseError::InvalidGroupId => "The group id is invalid.",
        ResponseError::MessageTooLarge => "The record batch is larger than the broker accepts.",
        ResponseError::OffsetOutOfRange => "The offset is outside the partition's log.",
        ResponseError::KafkaStorageError => "The broker failed to read or write its log.",
        ResponseError::CorruptMessage => "The record batch is corrupt.",
        ResponseError::InvalidRecord => "The record is invalid.",
        ResponseError::RequestTimedOut => "The request timed out.",
        _ => "the broker refused the request",
    }
}

/// Kafka's name of an error: `TopicAlreadyExists` -> `TOPIC_ALREADY_EXISTS`.
pub fn error_name(error: ResponseError) -> String {
    if let ResponseError::Unknown(code) = error {
        return format!("error code {code}");
    }
    let camel = error.to_string();
    let mut name = String::with_capacity(camel.len() + 8);
    for (i, c) in camel.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            name.push('_');
        }
        name.push(c.to_ascii_uppercase());
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_read_as_a_sentence_with_kafkas_name() {
        assert_eq!(
            api_error(36, "topic 'x'", None),
            "topic 'x' already exists (TOPIC_ALREADY_EXISTS)"
        );
        assert_eq!(
            api_error(37, "topic 'x'", Some("at least 1")),
            "topic 'x': the number of partitions is invalid: at least 1 (INVALID_PARTITIONS)"
        );
        assert_eq!(error_name(ResponseError::InvalidTopicException), "INVALID_TOPIC_EXCEPTION");
    }
}
