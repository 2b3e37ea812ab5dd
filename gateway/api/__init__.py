"""The HTTP surface: the app, the endpoint serving every API, the API edges, the admin and usage
endpoints, uvicorn.
"""
