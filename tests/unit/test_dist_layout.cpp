// Layout (DP x TP x PP, Megatron order) and the launcher environment: pure functions, no MPI.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "tessera/core/error.h"
#include "tessera/dist/environment.h"
#include "tessera/dist/layout.h"

namespace tessera::dist {
namespace {

TEST(DistLayout, MapsAreBijectionsAndGroupsPartitionTheWorld) {
  for (int world = 1; world <= 8; ++world) {
    for (int tp = 1; tp <= world; ++tp) {
      for (int pp = 1; pp * tp <= world; ++pp) {
        if (world % (tp * pp) != 0) continue;
        Layout l = Layout::from_world(world, tp, pp);
        SCOPED_TRACE(testing::Message() << "world " << world << " tp " << tp << " pp " << pp);
        ASSERT_EQ(l.world_size(), world);
        std::set<int> seen;
        for (int r = 0; r < world; ++r) {
          Coords c = l.coords_of(r);
          EXPECT_EQ(l.rank_of(c), r);
          seen.insert(r);
        }
        for (int dp = 0; dp < l.size(Axis::DP); ++dp)
          for (int t = 0; t < tp; ++t)
            for (int p = 0; p < pp; ++p)
              EXPECT_EQ(l.coords_of(l.rank_of({dp, t, p})), (Coords{dp, t, p}));
        for (Axis axis : {Axis::DP, Axis::TP, Axis::PP}) {
          auto groups = l.groups(axis);
          ASSERT_EQ(static_cast<int>(groups.size()), world / l.size(axis));
          std::map<int, int> owner;  // rank -> group index
          for (size_t g = 0; g < groups.size(); ++g) {
            ASSERT_EQ(static_cast<int>(groups[g].size()), l.size(axis));
            for (size_t i = 0; i < groups[g].size(); ++i) {
              const int r = groups[g][i];
              EXPECT_TRUE(owner.emplace(r, static_cast<int>(g)).second) << "rank " << r << " twice";
              EXPECT_EQ(l.group_index(axis, r), static_cast<int>(g));
              EXPECT_EQ(l.group_ranks(axis, r), groups[g]);
              // Members differ only along `axis`, whose coordinate is their index.
              Coords c = l.coords_of(r), c0 = l.coords_of(groups[g][0]);
              const int along = axis == Axis::DP ? c.dp : axis == Axis::TP ? c.tp : c.pp;
              EXPECT_EQ(along, static_cast<int>(i));
              if (axis != Axis::DP) EXPECT_EQ(c.dp, c0.dp);
              if (axis != Axis::TP) EXPECT_EQ(c.tp, c0.tp);
              if (axis != Axis::PP) EXPECT_EQ(c.pp, c0.pp);
            }
            if (g > 0) EXPECT_LT(groups[g - 1][0], groups[g][0]);
          }
          EXPECT_EQ(static_cast<int>(owner.size()), world);
        }
      }
    }
  }
}

TEST(DistLayout, MegatronOrderTpFastestThenDpThenPp) {
  Layout l(2, 2, 2);  // 8 ranks
  EXPECT_EQ(l.rank_of({0, 1, 0}), 1);
  EXPECT_EQ(l.rank_of({1, 0, 0}), 2);
  EXPECT_EQ(l.rank_of({0, 0, 1}), 4);
  EXPECT_EQ(l.groups(Axis::TP), (std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(l.groups(Axis::DP), (std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(l.groups(Axis::PP), (std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
}

TEST(DistLayout, BadSizesAndCoordinatesAreTyped) {
  EXPECT_THROW(Layout(0, 1, 1), ValueError);
  EXPECT_THROW(Layout::from_world(6, 4, 1), ValueError);
  Layout l(2, 2, 1);
  EXPECT_THROW(l.coords_of(4), IndexError);
  EXPECT_THROW(l.rank_of({0, 2, 0}), IndexError);
}

Environment from(const std::map<std::string, std::string>& vars) {
  return environment_from([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(DistEnvironment, LaunchersAndDefaults) {
  Environment none = from({});
  EXPECT_EQ(none.rank, 0);
  EXPECT_EQ(none.world_size, 1);
  EXPECT_EQ(none.launcher, "none");

  Environment ompi = from({{"OMPI_COMM_WORLD_RANK", "3"},
                           {"OMPI_COMM_WORLD_SIZE", "4"},
                           {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                           {"SLURM_PROCID", "0"},
                           {"SLURM_NTASKS", "1"}});
  EXPECT_EQ(ompi.launcher, "openmpi");
  EXPECT_EQ(ompi.rank, 3);
  EXPECT_EQ(ompi.world_size, 4);
  EXPECT_EQ(ompi.local_rank, 1);

  Environment torchrun = from({{"RANK", "2"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "2"}});
  EXPECT_EQ(torchrun.launcher, "torchrun");
  EXPECT_EQ(torchrun.rank, 2);
  EXPECT_EQ(torchrun.world_size, 8);

  Environment slurm = from({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}, {"SLURM_LOCALID", "1"}});
  EXPECT_EQ(slurm.launcher, "slurm");
  EXPECT_EQ(slurm.rank, 5);
  EXPECT_EQ(slurm.local_rank, 1);

  Environment no_local = from({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  EXPECT_EQ(no_local.local_rank, 0);
}

TEST(DistEnvironment, BadValuesAreValueErrors) {
  EXPECT_THROW(from({{"RANK", "x"}, {"WORLD_SIZE", "2"}}), ValueError);
  EXPECT_THROW(from({{"RANK", "1x"}, {"WORLD_SIZE", "2"}}), ValueError);
  EXPECT_THROW(from({{"RANK", "2"}, {"WORLD_SIZE", "2"}}), ValueError);
  EXPECT_THROW(from({{"RANK", "0"}, {"WORLD_SIZE", "0"}}), ValueError);
}

}  // namespace
}  // namespace tessera::dist
