//! `chorus-sim`: the simulator's command line (not yet implemented).

fn main() {
    eprintln!("chorus-sim: the simulator is not implemented yet");
    std::process::exit(2);
}
