"""The simulators' scripted experts written as robots' bags (``oxygen-sim record``)."""
