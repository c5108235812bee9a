"""``oxygen-bench``: the OxyGen comparison (sequential / parallel / shared / oxygen / action_only) on one model."""
