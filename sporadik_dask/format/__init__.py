"""The format: its names, the block, validation without data (pure, numpy only), and
the errors."""
