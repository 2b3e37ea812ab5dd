"""What one gateway app is built of: the runtime, the shared state, the policy store."""
