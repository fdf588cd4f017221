pub fn run(_s: u32) -> anyhow::Result<()> { anyhow::bail!("bench: not written yet") }
