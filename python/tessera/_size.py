"""tessera.Size: the shape of a tensor, a tuple of ints like torch.Size."""


class Size(tuple):
    """A tensor's shape. Compares equal to tuples; slicing gives a Size."""

    def __repr__(self):
        return f"tessera.Size({list(self)})"

    def __getitem__(self, index):
        item = super().__getitem__(index)
        return Size(item) if isinstance(index, slice) else item

    def numel(self):
        """The number of elements a tensor of this shape holds."""
        n = 1
        for s in self:
            n *= s
        return n
