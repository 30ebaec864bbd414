//! `chorus`: the node daemon (not yet implemented).

fn main() {
    eprintln!("chorus: the node daemon is not implemented yet");
    std::process::exit(2);
}
