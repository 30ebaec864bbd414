//! `chorus acl token create --role ROLE`: asks a node for a new API token (`POST /acl/tokens`,
//! with a `manage` token) and prints it; the node keeps no copy.

use anyhow::{bail, Context};

use super::http::request;
use crate::api::acl::NewToken;
use crate::api::auth::Role;

/// The `chorus acl` subcommands.
#[derive(clap::Subcommand)]
pub enum Cmd {
    /// API tokens.
    #[command(subcommand)]
    Token(TokenCmd),
}

/// `chorus acl token …`.
#[derive(clap::Subcommand)]
pub enum TokenCmd {
    /// Make a token of a role and print it (the only copy: the node stores none).
    ///
    /// Roles, each allowing what the ones before it do: read (list and read tasks, secrets
    /// redacted), submit (submit tasks, cancel one's own), operate (change the membership,
    /// cancel any task), manage (make tokens). Needs a manage token (the management token a
    /// node prints at its first start). A token is good on every node that shares the ACL key
    /// (`acl_key_file`).
    Create {
        /// The role of the new token.
        #[arg(long)]
        role: Role,
        /// The HTTP API of any node.
        #[arg(long, env = "CHORUS_ADDR", default_value = "127.0.0.1:7070")]
        addr: String,
        /// Print the answer as JSON (token, id, role).
        #[arg(long)]
        json: bool,
    },
}

impl clap::ValueEnum for Role {
    fn value_variants<'a>() -> &'a [Self] {
        &Role::ALL
    }
    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.as_str()))
    }
}

/// Runs a `chorus acl` command.
pub async fn run(cmd: Cmd) -> anyhow::Result<()> {
    match cmd {
        Cmd::Token(TokenCmd::Create { role, addr, json }) => {
            let body = serde_json::json!({ "role": role }).to_string();
            let (code, answer) = request(&addr, "POST", "/acl/tokens", Some(&body))
                .await
                .with_context(|| format!("cannot reach a chorus node at {addr}"))?;
            if code != 201 {
                bail!("{addr} answered {code}: {}", answer.trim());
            }
            if json {
                println!("{}", answer.trim());
                return Ok(());
            }
            let made: NewToken =
                serde_json::from_str(&answer).context("the node's answer is not a token")?;
            println!("{}", made.token);
            eprintln!(
                "a {} token (id {}); give it with --token, CHORUS_TOKEN or --token-file",
                made.role, made.id
            );
            Ok(())
        }
    }
}
