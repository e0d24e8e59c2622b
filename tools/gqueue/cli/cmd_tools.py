"""Commands of this area register themselves on the gqueue group when imported."""
