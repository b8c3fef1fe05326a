"""The online path of one login, inside a supervisor: the feature read, the coalesced fan-out
to the members, the precomputed tier, the answer (OfferService), and the event loop's lag."""
