"""The HTTP data path of nsq_to_http: requests built byte for byte as Go's nsq_to_http
writes them (requests, pure), which redirects are followed and where to (redirects,
pure), and a keep-alive HTTP/1.1 connection pool on trio and h11 that sends them (pool).

Layering: beside transport and httpapi; imports trio, h11 and nsqtools' lower layers,
never click, rich or httpx.
"""
