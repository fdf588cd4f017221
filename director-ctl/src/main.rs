fn main() {
    director_ctl::cli::main();
}
