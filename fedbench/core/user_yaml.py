"""YAML from a user's folder, read with bounded work: a config folder's files (--config-dir, FEDBENCH_CONF, a
plugin's), a run folder's `.hydra/` record that `fedbench resume` reads, a sweep's `multirun.yaml`.

A YAML file of a few hundred bytes can name a list nine times, that list's alias nine times, and so on ("billion
laughs"): PyYAML composes it as a graph of shared nodes, but whoever walks the values (OmegaConf makes a node of each,
Hydra merges them) expands it; 9 levels took minutes and gigabytes. A file nested 100,000 levels deep ends PyYAML's
recursive composer in a RecursionError (libyaml's C loader in a segmentation fault). Every YAML that fedbench, Hydra
or OmegaConf reads is composed here first: at most MAX_NODES values counted with every use of an alias (what the
values expand to, computed on the graph, never expanded), at most MAX_DEPTH levels, and no alias inside the node it
names. A file over the bounds is a YAML error naming the file, line and column, like any malformed file
(config.compose.malformed_yaml: one line, exit 2). OmegaConf, and so Hydra, reads through
`bounded` once config.compose.bound_yaml has wrapped its loader; fedbench's own plain reads use `load_yaml`."""

from __future__ import annotations

MAX_NODES = 100_000  # a run's .hydra/hydra.yaml holds 239 values, the largest packaged config file (config.yaml) 115
MAX_DEPTH = 64  # the packaged configs and a run's hydra.yaml nest 6 levels


def bounded(loader: type) -> type:
    """`loader` (a PyYAML loader class) composing within the bounds above (idempotent)."""
    if getattr(loader, "bounded_yaml", False):
        return loader
    import yaml
    from yaml.composer import ComposerError

    class Bounded(loader):
        bounded_yaml = True

        def compose_document(self):
            self._sizes, self._depth = {}, 0  # id(node) -> the values it expands to (done nodes only)
            return super().compose_document()

        def compose_node(self, parent, index):
            event = self.peek_event()
            if isinstance(event, yaml.AliasEvent):
                node = self.anchors.get(event.anchor)
                if node is not None and id(node) not in self._sizes:
                    raise ComposerError(None, None, f"the alias *{event.anchor} is used inside the node it names "
                                        "(a value that contains itself)", event.start_mark)
                return super().compose_node(parent, index)
            self._depth += 1
            if self._depth > MAX_DEPTH:
                raise ComposerError(None, None, f"values nested more than {MAX_DEPTH} levels deep",
                                    event.start_mark)
            try:
                node = super().compose_node(parent, index)
            finally:
                self._depth -= 1
            sizes = self._sizes
            if isinstance(node, yaml.SequenceNode):
                size = 1 + sum(sizes[id(item)] for item in node.value)
            elif isinstance(node, yaml.MappingNode):
                size = 1 + sum(sizes[id(key)] + sizes[id(value)] for key, value in node.value)
            else:
                size = 1
            if size > MAX_NODES:
                raise ComposerError(None, None, f"its values expand to more than {MAX_NODES:,} (aliases counted "
                                    "each time they are used: a YAML alias bomb, or a file far larger than a config)",
                                    node.start_mark)
            sizes[id(node)] = size
            return node

    Bounded.__name__ = Bounded.__qualname__ = f"Bounded{loader.__name__}"
    return Bounded


def load_yaml(stream):
    """yaml.safe_load within the bounds (text, bytes or an open file)."""
    import yaml

    return yaml.load(stream, Loader=_safe_loader())


def _safe_loader():
    import yaml

    global _SAFE
    if _SAFE is None:
        _SAFE = bounded(yaml.SafeLoader)  # pure Python: libyaml's CSafeLoader crashes on deep nesting
    return _SAFE


_SAFE = None
