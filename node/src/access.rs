//! Who may do what, independent of HTTP's plumbing: the roles, the tokens a key makes and
//! checks (plain and delegated), the checked caller, and the reasons a request is refused before
//! a handler sees it. [`crate::api::auth`] is the gate that applies them to requests; the daemon
//! uses them to make its key and count refusals, without depending on the API.

use std::fmt;
use std::str::FromStr;

use axum::http::StatusCode;
use hmac::{KeyInit, Mac};
use serde::{Deserialize, Serialize};

/// The id of the management token made with the key: one per key, so every node that shares
/// the key prints and accepts the same one.
pub const MANAGEMENT_ID: &str = "0000000000000000";

/// The length of a token id: 16 lowercase hex digits.
pub(crate) const ID_LEN: usize = 16;

/// Bytes of the HMAC kept in a token (128 bits).
pub(crate) const MAC_BYTES: usize = 16;

/// Life of a delegated token, seconds (the CLI asks for one per node it follows, per command).
pub const DELEGATION_TTL_S: u64 = 120;

/// How far past a checking node's clock a delegated token's expiry may lie: the issuing node's
/// clock may run ahead of it. A token that names a later expiry is refused.
pub(crate) const DELEGATION_SKEW_S: u64 = 300;

/// The longest node id a delegated token may name (base58 peer ids are ~52 characters).
const MAX_AUDIENCE_LEN: usize = 128;

/// What a token may do; each role allows what the roles before it do.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// List and read tasks (secrets redacted).
    Read,
    /// Submit tasks and cancel one's own.
    Submit,
    /// Change the membership, cancel any task.
    Operate,
    /// Make tokens.
    Manage,
}

impl Role {
    /// Every role, lowest first.
    pub const ALL: [Role; 4] = [Role::Read, Role::Submit, Role::Operate, Role::Manage];

    /// The role's name in tokens, the CLI and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Submit => "submit",
            Role::Operate => "operate",
            Role::Manage => "manage",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| format!("{s:?} is no role (read, submit, operate, manage)"))
    }
}

/// The secret that makes and checks tokens: 32 random bytes.
#[derive(Clone)]
pub struct AclKey([u8; 32]);

impl fmt::Debug for AclKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AclKey(..)")
    }
}

impl AclKey {
    /// A new key from the operating system's randomness.
    pub fn generate() -> anyhow::Result<Self> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
        Ok(AclKey(bytes))
    }

    /// The key from its file's text: 64 hex digits (surrounding whitespace ignored).
    pub fn from_hex(text: &str) -> Result<Self, String> {
        let bytes = hex::decode(text.trim())
            .map_err(|e| format!("not a key (64 hex digits expected): {e}"))?;
        let bytes: [u8; 32] = bytes
            .try_into()
            .map_err(|b: Vec<u8>| format!("{} bytes where a key has 32", b.len()))?;
        Ok(AclKey(bytes))
    }

    /// The key as its file holds it.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    fn mac(&self, role: Role, id: &str) -> hmac::Hmac<sha2::Sha256> {
        let mut mac = <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(&self.0)
            .expect("HMAC takes a key of any length");
        mac.update(b"chorus-token-v1\0");
        mac.update(role.as_str().as_bytes());
        mac.update(b"\0");
        mac.update(id.as_bytes());
        mac
    }

    /// The token of `role` with `id` (16 lowercase hex digits).
    pub fn mint(&self, role: Role, id: &str) -> String {
        let tag = self.mac(role, id).finalize().into_bytes();
        format!(
            "chorus_v1_{}_{id}_{}",
            role.as_str(),
            hex::encode(&tag[..MAC_BYTES])
        )
    }

    /// A token of `role` with a fresh random id.
    pub fn mint_new(&self, role: Role) -> anyhow::Result<(String, String)> {
        let mut raw = [0u8; ID_LEN / 2];
        getrandom::fill(&mut raw).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
        let id = hex::encode(raw);
        Ok((self.mint(role, &id), id))
    }

    fn mac_delegated(
        &self,
        role: Role,
        id: &str,
        audience: &str,
        expiry: u64,
    ) -> hmac::Hmac<sha2::Sha256> {
        let mut mac = <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(&self.0)
            .expect("HMAC takes a key of any length");
        mac.update(b"chorus-token-v1d\0");
        for part in [role.as_str(), id, audience, &expiry.to_string()] {
            mac.update(part.as_bytes());
            mac.update(b"\0");
        }
        mac
    }

    /// A token for `caller`'s role and id, good only at node `audience` until `expiry` (Unix
    /// seconds); `None` for an audience that is not a plain node id.
    pub fn delegate(&self, caller: &Caller, audience: &str, expiry: u64) -> Option<String> {
        if !valid_audience(audience) {
            return None;
        }
        let tag = self
            .mac_delegated(caller.role, &caller.id, audience, expiry)
            .finalize()
            .into_bytes();
        Some(format!(
            "chorus_v1d_{}_{}_{audience}_{expiry}_{}",
            caller.role.as_str(),
            caller.id,
            hex::encode(&tag[..MAC_BYTES])
        ))
    }

    /// Who `token` speaks for at node `me` at Unix time `now`: a token of this key, or a
    /// delegated one that names `me` and has not expired.
    pub fn check_at(&self, token: &str, me: &str, now: u64) -> Option<Caller> {
        let Some(rest) = token.strip_prefix("chorus_v1d_") else {
            return self.check(token);
        };
        let parts: Vec<&str> = rest.split('_').collect();
        let [role, id, audience, expiry, tag] = parts[..] else {
            return None;
        };
        let role: Role = role.parse().ok()?;
        let expiry: u64 = expiry.parse().ok()?;
        if !valid_id(id)
            || !valid_audience(audience)
            || audience != me
            || expiry < now
            || expiry > now + DELEGATION_SKEW_S
        {
            return None;
        }
        let tag = hex::decode(tag).ok()?;
        if tag.len() != MAC_BYTES {
            return None;
        }
        self.mac_delegated(role, id, audience, expiry)
            .verify_truncated_left(&tag)
            .ok()?;
        Some(Caller {
            role,
            id: id.to_owned(),
            delegated: true,
        })
    }

    /// The management token of this key.
    pub fn management_token(&self) -> String {
        self.mint(Role::Manage, MANAGEMENT_ID)
    }

    /// Who `token` speaks for, if this key made it. The comparison takes the same time however
    /// much of the mac matches.
    pub fn check(&self, token: &str) -> Option<Caller> {
        let rest = token.strip_prefix("chorus_v1_")?;
        let mut parts = rest.split('_');
        let (role, id, tag) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || !valid_id(id) {
            return None;
        }
        let role: Role = role.parse().ok()?;
        let tag = hex::decode(tag).ok()?;
        if tag.len() != MAC_BYTES {
            return None;
        }
        self.mac(role, id).verify_truncated_left(&tag).ok()?;
        Some(Caller {
            role,
            id: id.to_owned(),
            delegated: false,
        })
    }
}

/// A token id: [`ID_LEN`] lowercase hex digits.
fn valid_id(id: &str) -> bool {
    id.len() == ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A node id a delegated token may name: base58 characters only (no `_`), bounded.
fn valid_audience(audience: &str) -> bool {
    !audience.is_empty()
        && audience.len() <= MAX_AUDIENCE_LEN
        && audience.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Seconds since the Unix epoch by this host's clock.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The holder of a checked token, as handlers see it (a request extension).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub role: Role,
    /// The token's id: who submitted a task, in the task's record.
    pub id: String,
    /// A delegated token (good at this node only, briefly): it cannot be delegated again.
    pub delegated: bool,
}

/// Why a request was refused before any handler saw it; the `reason` label in `/metrics`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HttpRefusal {
    /// `Host` is missing or a name this node does not answer to (DNS rebinding).
    BadHost,
    /// `Origin` names another site than `Host` (a web page's request).
    CrossOrigin,
    /// A body that is not `application/json`.
    ContentType,
    /// No `Authorization: Bearer` token.
    NoToken,
    /// A token this node's key did not make.
    BadToken,
    /// A good token whose role does not allow the request.
    Role,
}

impl HttpRefusal {
    /// Every reason, for `/metrics` (each listed, 0 or not).
    pub const ALL: [HttpRefusal; 6] = [
        HttpRefusal::BadHost,
        HttpRefusal::CrossOrigin,
        HttpRefusal::ContentType,
        HttpRefusal::NoToken,
        HttpRefusal::BadToken,
        HttpRefusal::Role,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            HttpRefusal::BadHost => "bad_host",
            HttpRefusal::CrossOrigin => "cross_origin",
            HttpRefusal::ContentType => "content_type",
            HttpRefusal::NoToken => "no_token",
            HttpRefusal::BadToken => "bad_token",
            HttpRefusal::Role => "role",
        }
    }

    pub(crate) fn status(self) -> StatusCode {
        match self {
            HttpRefusal::BadHost | HttpRefusal::CrossOrigin => StatusCode::FORBIDDEN,
            HttpRefusal::ContentType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            HttpRefusal::NoToken | HttpRefusal::BadToken => StatusCode::UNAUTHORIZED,
            HttpRefusal::Role => StatusCode::FORBIDDEN,
        }
    }
}
