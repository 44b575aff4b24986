// The strategy registry (gpu/registry.hpp): its table builds every backend's strategies in table
// order under the row's name, and the traits of each row hold for the strategies themselves
// (the CPU emulation here; the CUDA side of deterministic and every_recipe is checked on the
// device by test_gpu_strategies).
#include "gpu/registry.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "datasets/synthetic.hpp"
#include "gpu/plans/vocab_shards.hpp"
#include "numerics/error.hpp"
#include "numerics/recipe.hpp"

namespace xentlab {
namespace {

std::vector<std::string> table_names() {
  std::vector<std::string> names;
  for (const StrategyEntry& e : strategy_table()) names.emplace_back(e.name);
  return names;
}

// The rows of the default strategy set (StrategyTraits::in_default_set), in table order.
std::vector<std::string> default_names() {
  std::vector<std::string> names;
  for (const StrategyEntry& e : strategy_table())
    if (e.traits.in_default_set) names.emplace_back(e.name);
  return names;
}

TEST(Registry, EveryRowHasAUniqueNameAndACpuEmulation) {
  ASSERT_FALSE(strategy_table().empty());
  std::set<std::string> seen;
  for (const StrategyEntry& e : strategy_table()) {
    EXPECT_FALSE(std::string(e.name).empty());
    EXPECT_TRUE(seen.insert(e.name).second) << "duplicate row " << e.name;
    // The audit judges every GPU run against its emulated twin.
    EXPECT_NE(e.emulated, nullptr) << e.name;
    EXPECT_EQ(find_strategy_entry(e.name), &e);
    EXPECT_EQ(&strategy_traits(e.name), &e.traits);
  }
}

TEST(Registry, BackendsBuildTheTableInOrderUnderTheRowsNames) {
  for (const StrategySet set : {StrategySet::default_set, StrategySet::all}) {
    const bool all = set == StrategySet::all;
    std::vector<std::string> built;
    for (const auto& s : make_strategies(Backend::cpu_emulation, set)) {
      EXPECT_EQ(s->backend(), Backend::cpu_emulation) << s->name();
      built.push_back(s->name());
    }
    EXPECT_EQ(built, all ? table_names() : default_names());
    EXPECT_EQ(strategy_names(Backend::cpu_emulation, set), built);
    // CUDA: the rows of the set with a CUDA factory, in table order; none without the backend.
    std::vector<std::string> cuda_rows;
    for (const StrategyEntry& e : strategy_table())
      if (e.cuda != nullptr && (all || e.traits.in_default_set)) cuda_rows.emplace_back(e.name);
    if (!cuda_backend_built()) {
      EXPECT_TRUE(cuda_rows.empty());
    }
    std::vector<std::string> cuda_built;
    for (const auto& s : make_strategies(Backend::cuda, set)) {
      EXPECT_EQ(s->backend(), Backend::cuda) << s->name();
      cuda_built.push_back(s->name());
    }
    EXPECT_EQ(cuda_built, cuda_rows);
    EXPECT_EQ(strategy_names(Backend::cuda, set), cuda_rows);
  }
  // The default arguments are the default set.
  EXPECT_EQ(strategy_names(Backend::cpu_emulation), default_names());
  EXPECT_EQ(make_strategies(Backend::cpu_emulation).size(), default_names().size());
  for (const StrategyEntry& e : strategy_table()) {
    const auto s = make_strategy(Backend::cpu_emulation, e.name);
    ASSERT_NE(s, nullptr) << e.name;
    EXPECT_EQ(s->name(), e.name);
    EXPECT_EQ(make_strategy(Backend::cuda, e.name) != nullptr, e.cuda != nullptr) << e.name;
  }
}

TEST(Registry, UnknownNamesAreRefusedNamingTheRegisteredOnes) {
  EXPECT_EQ(find_strategy_entry("tiled"), nullptr);
  EXPECT_EQ(make_strategy(Backend::cpu_emulation, "tiled"), nullptr);
  try {
    (void)strategy_traits("tiled");
    ADD_FAILURE() << "strategy_traits accepted 'tiled'";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'tiled'"), std::string::npos) << m;
    for (const std::string& n : table_names()) EXPECT_NE(m.find(n), std::string::npos) << m;
  }
}

// A strategy with no emulated twin is listed (the audit refuses it), as is a name of no row.
TEST(Registry, StrategiesWithoutAnEmulatedTwinAreFound) {
  const auto some_factory = strategy_table().front().emulated;
  const std::vector<StrategyEntry> table = {{"with-twin", {}, some_factory, nullptr},
                                            {"cuda-only", {}, nullptr, some_factory}};
  EXPECT_EQ(without_emulated_twin({"cuda-only", "with-twin", "nowhere"}, table),
            (std::vector<std::string>{"cuda-only", "nowhere"}));
  EXPECT_TRUE(without_emulated_twin({"with-twin"}, table).empty());
  EXPECT_TRUE(without_emulated_twin(table_names(), strategy_table()).empty());
}

// vocab_order: what every backend's strategy declares for every recipe of the audit's grid.
TEST(RegistryTraits, VocabOrderIsWhatEveryBackendDeclares) {
  for (const Backend b : {Backend::cpu_emulation, Backend::cuda})
    for (const auto& s : make_strategies(b, StrategySet::all))
      for (const Recipe& r : default_recipe_grid())
        EXPECT_EQ(s->arithmetic(r).vocab_order, strategy_traits(s->name()).vocab_order)
            << to_string(b) << " " << s->name() << " " << r.name();
}

// chunks_tokens, on the emulation: a strategy that chunks adds each chunk's dW and db into a bf16
// accumulator, so one-token chunks round after every token and differ from one chunk of all
// tokens; a strategy that does not chunk ignores chunk_tokens, bit for bit.
TEST(RegistryTraits, ChunksTokensIsWhetherTheChunkSizeChangesTheGradients) {
  const Problem pb = make_gaussian_linear(24, 300, 16, DType::bf16, 2.0, 7);
  RunRequest req;
  req.problem = &pb;
  req.recipe = parse_recipe("bf16/bf16/bf16/bf16");
  for (const auto& s : make_strategies(Backend::cpu_emulation, StrategySet::all)) {
    req.chunk_tokens = 1;
    const StrategyOutputs one = s->run(req);
    req.chunk_tokens = pb.N;
    const StrategyOutputs all = s->run(req);
    EXPECT_EQ(one.loss, all.loss) << s->name();  // the forward never depends on chunking
    EXPECT_EQ(one.dH, all.dH) << s->name();
    if (strategy_traits(s->name()).chunks_tokens)
      EXPECT_NE(one.dW, all.dW) << s->name();
    else
      EXPECT_EQ(one.dW, all.dW) << s->name();
  }
}

// shards_vocabulary, on the emulation: a strategy that shards the vocabulary declares the
// request's ranks and its outputs change with them (3 shards of 100 rows: other partial sums of
// the sum-exp in bf16 and of dH in fp32, returned unrounded); every other strategy ignores
// RunRequest::ranks, bit for bit, and declares one rank.
TEST(RegistryTraits, ShardsVocabularyIsWhetherTheRanksChangeTheRun) {
  const Problem pb = make_gaussian_linear(24, 300, 16, DType::bf16, 3.0, 9);
  RunRequest req;
  req.problem = &pb;
  req.recipe = parse_recipe("bf16/bf16/bf16/fp32");
  req.chunk_tokens = 8;
  int sharding = 0;
  for (const auto& s : make_strategies(Backend::cpu_emulation, StrategySet::all)) {
    const bool shards = strategy_traits(s->name()).shards_vocabulary;
    sharding += shards ? 1 : 0;
    req.ranks = 1;
    const StrategyOutputs one = s->run(req);
    EXPECT_EQ(s->run_arithmetic(req).vocab_ranks, 1) << s->name();
    req.ranks = 3;
    const StrategyOutputs three = s->run(req);
    EXPECT_EQ(s->run_arithmetic(req).vocab_ranks, shards ? 3 : 1) << s->name();
    if (shards) {
      EXPECT_NE(one.dH, three.dH) << s->name();
      EXPECT_NE(one.lse, three.lse) << s->name();
    } else {
      EXPECT_EQ(one.dH, three.dH) << s->name();
      EXPECT_EQ(one.lse, three.lse) << s->name();
      EXPECT_EQ(one.dW, three.dW) << s->name();
    }
  }
  EXPECT_GT(sharding, 0);
}

// splits_vocabulary, on the emulation: a strategy that splits the vocabulary on one device
// declares the request's splits (rescaled to the global maximum) and its outputs change with them
// (3 splits of 100 rows: other partial sums of the sum-exp in bf16 and of dH in fp32); every other
// strategy ignores RunRequest::vocab_splits, bit for bit.
TEST(RegistryTraits, SplitsVocabularyIsWhetherTheSplitsChangeTheRun) {
  const Problem pb = make_gaussian_linear(24, 300, 16, DType::bf16, 3.0, 9);
  RunRequest req;
  req.problem = &pb;
  req.recipe = parse_recipe("bf16/bf16/bf16/fp32");
  req.chunk_tokens = 8;
  int splitting = 0;
  for (const auto& s : make_strategies(Backend::cpu_emulation, StrategySet::all)) {
    const bool splits = strategy_traits(s->name()).splits_vocabulary;
    splitting += splits ? 1 : 0;
    req.vocab_splits = 1;
    const StrategyOutputs one = s->run(req);
    EXPECT_FALSE(s->run_arithmetic(req).rescaled_ranks) << s->name();
    req.vocab_splits = 3;
    const StrategyOutputs three = s->run(req);
    EXPECT_EQ(s->run_arithmetic(req).rescaled_ranks, splits) << s->name();
    if (splits) {
      EXPECT_EQ(s->run_arithmetic(req).vocab_ranks, 3) << s->name();
      EXPECT_NE(one.dH, three.dH) << s->name();
      EXPECT_NE(one.lse, three.lse) << s->name();
    } else {
      EXPECT_EQ(one.dH, three.dH) << s->name();
      EXPECT_EQ(one.lse, three.lse) << s->name();
      EXPECT_EQ(one.dW, three.dW) << s->name();
    }
  }
  EXPECT_GT(splitting, 0);
}

// in_default_set: the default set leaves out exactly the rows so marked, which run when named;
// a row left out shards the vocabulary (its one-rank runs are chunked's, test_vocab_parallel) or
// splits it on one device (its one-split runs are naive's, test_vocab_chunked).
TEST(RegistryTraits, TheDefaultSetLeavesOutTheRowsThatRunWhenNamed) {
  std::vector<std::string> named_only;
  for (const StrategyEntry& e : strategy_table())
    if (!e.traits.in_default_set) {
      named_only.emplace_back(e.name);
      EXPECT_TRUE(e.traits.shards_vocabulary || e.traits.splits_vocabulary) << e.name;
      EXPECT_NE(make_strategy(Backend::cpu_emulation, e.name), nullptr) << e.name;
    }
  EXPECT_EQ(named_only, (std::vector<std::string>{"vocab_parallel", "vocab_chunked"}));
  for (const std::string& n : strategy_names(Backend::cpu_emulation))
    EXPECT_TRUE(strategy_traits(n).in_default_set) << n;
}

// gemms_apart (the strategies `xentlab bench --gemms-alone` times the GEMMs of alone): not fused
// (GEMMs and loss in one kernel) nor vocab_parallel, and the default set has one, so that the
// option without --strategies always times some.
TEST(RegistryTraits, GemmsApartAreTheStrategiesWithCublasGemms) {
  EXPECT_EQ(gemms_apart_strategies(),
            (std::vector<std::string>{"naive", "chunked", "checkpointed", "vocab_chunked"}));
  bool in_default = false;
  for (const std::string& n : gemms_apart_strategies())
    in_default = in_default || strategy_traits(n).in_default_set;
  EXPECT_TRUE(in_default);
}

// The vocabulary-parallel layout: the shards tile [0, V) in rank order, sizes differ by at most
// one with the larger ones first (numpy.array_split), vocab_shard_of inverts it, and a rank
// without a row is refused.
TEST(VocabShards, TileTheVocabularyWithTheLargerShardsFirst) {
  for (std::int64_t V : {1, 7, 8, 300, 128256})
    for (std::int64_t P : {1, 2, 3, 7, 8}) {
      if (P > V) {
        EXPECT_THROW(vocab_shards(V, P), InputError) << V << " " << P;
        continue;
      }
      const std::vector<VocabShard> sh = vocab_shards(V, P);
      ASSERT_EQ(static_cast<std::int64_t>(sh.size()), P);
      std::int64_t next = 0;
      for (std::int64_t r = 0; r < P; ++r) {
        const VocabShard& s = sh[static_cast<std::size_t>(r)];
        EXPECT_EQ(s.begin, next);
        EXPECT_EQ(s.size(), V / P + (r < V % P ? 1 : 0)) << V << " " << P << " " << r;
        for (std::int64_t v = s.begin; v < s.end; v += std::max<std::int64_t>(1, s.size() / 5))
          EXPECT_EQ(vocab_shard_of(v, V, P), r) << V << " " << P << " " << v;
        EXPECT_EQ(vocab_shard_of(s.end - 1, V, P), r);
        next = s.end;
      }
      EXPECT_EQ(next, V);
    }
  EXPECT_THROW(vocab_shards(10, 0), InputError);
}

}  // namespace
}  // namespace xentlab
