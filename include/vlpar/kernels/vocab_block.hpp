#pragma once
// Which rows of a vocabulary a table or a logits block holds, for the vocab-parallel embedding, LM head and
// cross-entropy (nn/vocab_parallel.hpp): rows [begin, begin + rows) of a vocabulary of `vocab` ids, where rows is
// the table's (or logits') size along the vocab dim. The default {0, 0} is the whole vocabulary (vocab = rows).
// Ids and labels are checked against [0, vocab); an id outside this block is another rank's (a zero row in the
// embedding, no gradient, no one-hot in the cross-entropy backward).
#include <cstdint>

namespace vlpar {

struct VocabBlock {
  int64_t begin = 0;  // first id this block holds
  int64_t vocab = 0;  // ids of the whole vocabulary; 0: the block is the whole vocabulary
  /// @brief The full vocabulary size for a block of `rows` rows.
  int64_t full(int64_t rows) const { return vocab > 0 ? vocab : rows; }
  /// @brief The block's row of `id`, or −1 when another block holds it.
  int64_t local(int64_t id, int64_t rows) const { return id >= begin && id < begin + rows ? id - begin : -1; }
};

}  // namespace vlpar
