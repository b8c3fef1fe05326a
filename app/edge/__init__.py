"""The edge: Serve's HAProxy, made to refuse in C and to stamp each login's arrival
(haproxy_config), through the `offers-haproxy` wrapper Serve starts (wrapper)."""
