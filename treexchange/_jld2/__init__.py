"""JLD2 semantics over the HDF5 structures of :mod:`treexchange._hdf5`: reading, presenting, writing.

A JLD2 file is HDF5 whose committed datatypes (under ``/_types``) carry the Julia type of each
value (``julia_type``/``written_type`` attributes); this package turns those into the value model
of :mod:`treexchange._values` and back, byte for byte as JLD2.jl 0.6 writes (format 0.2.0).

=====================  =========================================================================
``_header``            the 512-byte user block text (``JLD2 Version 0.2.0 …``), versions accepted
``_reader``            :class:`Reader`: a file's datasets, references and attributes as values
``_typesread``         committed datatypes -> Julia types -> decoding plans (``TypeResolver``)
``_plans``             decoding plans: the bytes of one element of an HDF5 type -> a value
``_layout``            how a struct was laid out on disk (shared by reader and writer)
``_typeutil``          tuple spellings, ghost (zero-size) values, basic type names
``_nodes``             lazy nodes (``Group``, ``Node``, ``ArrayNode`` …): read where looked at
``_writer``            :class:`JLD2Writer`: the write session (datasets, groups, committed types)
``_writer_types``      the Julia types the writer reasons with (``JT``, ``TypeFactory.of_value``)
``_writer_arrays``     array payloads: column-major bytes in bounded pieces, compressed chunks
``_writer_sink``       random-access output, header checksums in bulk
``_writer_bulk``       alike references (a Dict's Pairs, a model's layers) written in runs
``_writer_runs``       a run's forms and offsets worked out with numpy (heap keys, positions)
``_writer_dicts``      a Dict of alike Dicts laid out at once, inner Pairs included
``_writer_rows``       a run's bytes: rows of alike headers put into the sink's window
``_writefile``         ``write_jld2``: the one write loop (``save``, ``convert``, other formats' import)
``_encode_hdf5``       byte encoders of the HDF5 structures JLD2.jl writes
=====================  =========================================================================

Where one Julia type is handled: read (``_typesread``/``_plans``) -> present (``_nodes``,
``treexchange._inspect``) -> write (``_writer_types``/``_writer``). Adding a type touches the places
of its kind, each one function or one table:

- numbers, ``Bool``: ``TypeResolver._basic_plan`` (``NumberPlan``, ``BoolPlan``) -> ``LeafNode``
  -> ``TypeFactory.prim``/``of_dtype``, ``JLD2Writer.encode_value``
- ``Int128``/``UInt128``, ``BFloat16``: ``Int128Plan``, ``BFloat16Plan`` -> ``ArrayNode`` (dtype
  ``int128``/``bfloat16``) -> ``TypeFactory.int128``/``of_dtype``, ``_writer_arrays``
- ``Char``, ``@enum``, other primitive bits: ``BitsPlan`` (a ``JuliaBits``) -> ``LeafNode``
  (a ``JuliaBits`` Char prints itself ``'a'`` in type text) -> ``TypeFactory.bits``
- ``String``, ``Symbol``: ``VlenStringPlan`` (``symbol=True``), ``FixedStringPlan`` -> ``LeafNode``
  -> ``TypeFactory.of_value``
- ``Array{T,N}``: ``Reader`` datasets with an element plan (``ReferencePlan`` for references) ->
  ``ArrayNode`` (zero-copy) or ``RefVectorNode`` -> ``TypeFactory.array_of``,
  ``JLD2Writer._write_array``
- ``Tuple``/``NTuple``, ``NamedTuple``, immutable structs: ``CompoundPlan`` (+ ``_layout``;
  ``vector_to_tuple`` for an NTuple longer than 10) -> ``CompoundNode``
  (``_typeutil.tuple_element_types``) -> ``TypeFactory.tuple_of``/``namedtuple_of``/
  ``_struct_type``, ``commit_compound``, ``_datatype_name_params`` (JLD2's NTuple spelling)
- mutable structs: ``_plans.mark_mutable`` (identity kept by reference) -> ``CompoundNode``
  (``(same object as X)`` in inspect) -> ``TypeFactory._make_mutable``, ``JLD2Writer.write_ref``
- ``Dict``/``IdDict``/``ImmutableDict``/``OrderedDict`` (``_DICT_NAMES``): ``_custom`` ->
  ``pairs_to_dict`` -> ``DictNode`` (lazy, O(1) keys) -> ``TypeFactory.dict_of``
  (``SERIALIZED_DICT``), ``JLD2Writer._write_kvvec``
- ``BigInt`` (any of its names, ``_juliatype.is_bigint_name``): ``_custom`` -> ``base62_to_int``
  (a ``BigInt`` keeping the name) -> ``LeafNode`` -> ``TypeFactory.bigint``, ``_base62``
- ``BigFloat`` (``_juliatype.is_bigfloat_name``): ``_custom`` -> ``text_to_bigfloat`` (a
  ``BigFloat`` keeping its text and name) -> ``LeafNode`` -> ``TypeFactory.bigint``
- other custom serializations (``writeas``): ``_custom`` -> ``wrap_custom`` -> ``_custom_node``
  -> ``JLD2Writer._write_custom``
- ``Union`` fields and arrays: ``UnionElementPlan`` -> the member's node ->
  ``TypeFactory._inline_union``, ``write_union_dataset``
- types as values (``DataType``, type parameters): ``DataTypePlan``/``UnionTypePlan`` ->
  ``LeafNode`` (a ``Singleton``) -> ``encode_datatype_value``, ``refs_from_types``
- singletons (``nothing``, functions, ``()``): ``GhostPlan`` -> ``ghost_node`` ->
  ``TypeFactory.singleton``

Which Julia type a Python value has is decided once, in ``treexchange._typeof.type_of``: the
writer (``TypeFactory.of_value``, the factory being its ``TypeBuilder``) and ``julia_type_of``
(``inspect``, the schema) both run it; a new Python value class gets its rule there, and the writer
only adds how the type is stored.

Rules the code relies on (details in the modules): committed types are resolved once per address
and cached; every size, count and depth read from the file is checked against ``Limits`` before
it drives an allocation; the writer takes each storage decision (inline, reference, committed) in
one place (``JLD2Writer.field_kind``), as JLD2.jl's ``odr`` does.
"""
