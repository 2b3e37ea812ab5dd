"""The gateway's config (`gateway.yaml`) and the settings models it is made of."""
