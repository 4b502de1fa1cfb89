//! The connection's side of SASL: what a frame read before authentication becomes.
//!
//! Kafka's order (SaslServerAuthenticator): ApiVersions at any time; SaslHandshake names
//! the mechanism; with SaslHandshake v1+, SaslAuthenticate requests carry the tokens; with
//! v0, the tokens are bare length-prefixed frames (Kafka before 1.0). Anything else before
//! the exchange completes closes the connection unanswered; SaslAuthenticate before a
//! handshake, or a second handshake, answers ILLEGAL_SASL_STATE and closes.

use std::cell::RefCell;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, RequestKind, ResponseKind, SaslAuthenticateResponse, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use tracing::{debug, warn};

use super::{AuthFailure, SaslConfig, Session, Step};
use crate::codec::Request;
use crate::connection::RequestHandler;

pub const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
pub const ILLEGAL_SASL_STATE: i16 = 34;
pub const SASL_AUTHENTICATION_FAILED: i16 = 58;

/// Largest frame read before authentication (Kafka's `sasl.server.max.receive.size`): an
/// unauthenticated client cannot make the broker buffer a large request.
pub const MAX_UNAUTHENTICATED_FRAME_BYTES: usize = 512 * 1024;

enum State {
    AwaitingHandshake,
    /// After SaslHandshake v1+: tokens in SaslAuthenticate requests.
    Authenticating(Session),
    /// After SaslHandshake v0: tokens as bare frames.
    RawTokens(Session),
    /// Failed: the connection is closing.
    Failed,
    /// Authenticated: every request goes to the handler.
    Open,
}

/// How the connection answers one frame read before authentication.
pub(crate) struct Answer {
    pub api_key: ApiKey,
    pub api_version: i16,
    pub correlation_id: i32,
    /// `None`: nothing is written (a failed bare-token exchange just closes).
    pub body: Option<ResponseKind>,
    /// Written as a bare frame of SaslAuthenticate's bytes (after SaslHandshake v0).
    pub raw: bool,
    /// Wait this long before answering (failures, `FailureThrottle`).
    pub delay: Duration,
    /// Close the connection once this answer is written.
    pub close: bool,
    /// The exchange completed: the connection's principal from now on.
    pub principal: Option<Rc<str>>,
}

/// One connection's SASL state on a SASL listener.
pub(crate) struct SaslGate {
    config: Rc<SaslConfig>,
    state: RefCell<State>,
    peer: SocketAddr,
}

impl SaslGate {
    pub fn new(config: Rc<SaslConfig>, peer: SocketAddr) -> SaslGate {
        SaslGate { config, state: RefCell::new(State::AwaitingHandshake), peer }
    }

    pub fn is_open(&self) -> bool {
        matches!(*self.state.borrow(), State::Open)
    }

    pub fn expects_raw_token(&self) -> bool {
        matches!(*self.state.borrow(), State::RawTokens(_))
    }

    /// A bare token after SaslHandshake v0.
    pub async fn raw_token<H: RequestHandler>(&self, handler: &H, token: Bytes) -> Answer {
        let State::RawTokens(session) = self.state.replace(State::Failed) else {
            unreachable!("raw tokens are read only after SaslHandshake v0")
        };
        let mut answer = self.exchange(handler, session, token, true).await;
        answer.api_version = 0;
        answer
    }

    /// A request read before authentication (not ApiVersions). An error closes the
    /// connection unanswered.
    pub async fn request<H: RequestHandler>(
        &self,
        handler: &H,
        request: Request,
    ) -> io::Result<Answer> {
        let state = self.state.replace(State::Failed);
        let version = request.api_version;
        let mut answer = match (state, request.body) {
            (State::AwaitingHandshake, RequestKind::SaslHandshake(body)) => {
                self.handshake(&body.mechanism, version)
            }
            (State::Authenticating(session), RequestKind::SaslAuthenticate(body)) => {
                self.exchange(handler, session, body.auth_bytes, false).await
            }
            (_, RequestKind::SaslHandshake(_)) => {
                let body = SaslHandshakeResponse::default().with_error_code(ILLEGAL_SASL_STATE);
                failure(ResponseKind::SaslHandshake(body))
            }
            (_, RequestKind::SaslAuthenticate(_)) => {
                let body = SaslAuthenticateResponse::default()
                    .with_error_code(ILLEGAL_SASL_STATE)
                    .with_error_message(Some(StrBytes::from_static_str(
                        "SaslAuthenticate before SaslHandshake",
                    )));
                failure(ResponseKind::SaslAuthenticate(body))
            }
            (_, _) => {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!("{:?} before SASL authentication", request.api_key),
                ))
            }
        };
        answer.api_key = request.api_key;
        answer.api_version = version;
        answer.correlation_id = request.header.correlation_id;
        Ok(answer)
    }

    fn handshake(&self, mechanism: &str, version: i16) -> Answer {
        let enabled =
            self.config.mechanisms.iter().map(|m| StrBytes::from_static_str(m.name())).collect();
        let body = SaslHandshakeResponse::default().with_mechanisms(enabled);
        let Some(mechanism) = self.config.enabled(mechanism) else {
            debug!(peer = %self.peer, mechanism, "SASL mechanism not enabled");
            let body = body.with_error_code(UNSUPPORTED_SASL_MECHANISM);
            return failure(ResponseKind::SaslHandshake(body));
        };
        let session = Session::new(mechanism);
        *self.state.borrow_mut() = match version {
            0 => State::RawTokens(session),
            _ => State::Authenticating(session),
        };
        answer(ResponseKind::SaslHandshake(body))
    }

    /// Feeds one token to the session; the next state follows from the step.
    async fn exchange<H: RequestHandler>(
        &self,
        handler: &H,
        mut session: Session,
        token: Bytes,
        raw: bool,
    ) -> Answer {
        let lookup = |user: &str, m| handler.scram_credential(user, m);
        // (the user once authenticated, the token to send)
        let outcome = match session.step(&token, super::scram::random_nonce, lookup) {
            Ok(Step::Challenge(challenge)) => Ok((None, challenge)),
            Ok(Step::Done { user, token }) => Ok((Some(user), token)),
            Ok(Step::CheckPassword(login)) => {
                let checked = glommio::executor().spawn_blocking(move || login.verify()).await;
                checked.map(|user| (Some(user), Vec::new()))
            }
            Err(e) => Err(e),
        };
        let (answer, next) = match outcome {
            Ok((None, challenge)) => (token_answer(challenge, raw), session_state(session, raw)),
            Ok((Some(user), token)) => {
                let mechanism = session.mechanism().name();
                debug!(peer = %self.peer, mechanism, user, "SASL authenticated");
                handler.authentication_done(true);
                let mut answer = token_answer(token, raw);
                answer.principal = Some(Rc::from(format!("User:{user}")));
                (answer, State::Open)
            }
            Err(e) => (self.failed(handler, &session, e, raw), State::Failed),
        };
        *self.state.borrow_mut() = next;
        answer
    }

    fn failed<H: RequestHandler>(
        &self,
        handler: &H,
        session: &Session,
        e: AuthFailure,
        raw: bool,
    ) -> Answer {
        handler.authentication_done(false);
        let delay = self.config.throttle.failure_delay(self.peer.ip(), Instant::now());
        warn!(
            peer = %self.peer,
            mechanism = session.mechanism().name(),
            user = e.user.as_deref().or(session.user()).map(truncated).unwrap_or_default(),
            reason = %e.message,
            delay_ms = delay.as_millis() as u64,
            "SASL authentication failed"
        );
        let body = SaslAuthenticateResponse::default()
            .with_error_code(SASL_AUTHENTICATION_FAILED)
            .with_error_message(Some(StrBytes::from_string(e.message)));
        // After SaslHandshake v0 there is no frame to carry an error: Kafka just closes.
        let body = (!raw).then_some(ResponseKind::SaslAuthenticate(body));
        Answer { body, delay, close: true, ..answer_base() }
    }
}

/// A user name as logged: at most 64 characters of whatever the client sent.
fn truncated(user: &str) -> String {
    user.chars().take(64).collect()
}

fn session_state(session: Session, raw: bool) -> State {
    match raw {
        true => State::RawTokens(session),
        false => State::Authenticating(session),
    }
}

fn token_answer(token: Vec<u8>, raw: bool) -> Answer {
    let body = SaslAuthenticateResponse::default().with_auth_bytes(Bytes::from(token));
    Answer { raw, ..answer(ResponseKind::SaslAuthenticate(body)) }
}

fn answer_base() -> Answer {
    Answer {
        api_key: ApiKey::SaslAuthenticate,
        api_version: 0,
        correlation_id: 0,
        body: None,
        raw: false,
        delay: Duration::ZERO,
        close: false,
        principal: None,
    }
}

fn answer(body: ResponseKind) -> Answer {
    Answer { body: Some(body), ..answer_base() }
}

fn failure(body: ResponseKind) -> Answer {
    Answer { close: true, ..answer(body) }
}
