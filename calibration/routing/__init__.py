"""Pre-generation routing: fitting the router, prompt features and the route-then-cascade hybrid."""
