from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save


class DashboardsConfig(AppConfig):
    name = "dashboards"

    def ready(self) -> None:
        # headline imports models of several apps: not before the app registry is ready
        from dashboards import headline

        # What prices a host or places it (its terms, the catalog, a team's overrides, its
        # site): an edit makes the stored cost figures (dashboards.headline snapshots) of its
        # team stale -- every team's for the shared catalog -- so the next page computes them
        # afresh instead of showing the old ones.
        for label in ("costs.PriceOverride", "costs.Price", "costs.PricePeriod",
                      "costs.HostTermsPeriod", "costs.HostCostConfig", "costs.InstanceType",
                      "telemetry.Host", "telemetry.Gpu", "carbon.Site", "carbon.HostSite",
                      "carbon.FactorsPeriod", "workloads.Workload"):
            model = self.apps.get_model(label)
            post_save.connect(headline.pricing_changed, sender=model,
                              dispatch_uid=f"team-home-{label}-save")
        # Deletions: only an override's (a receiver on a model makes Django collect and delete
        # its rows one by one in cascades, which would change how hosts and teams are deleted).
        post_delete.connect(headline.pricing_changed,
                            sender=self.apps.get_model("costs.PriceOverride"),
                            dispatch_uid="team-home-costs.PriceOverride-delete")
